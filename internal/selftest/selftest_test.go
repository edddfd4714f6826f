package selftest_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/selftest"
)

func probe(t *testing.T, check string, mod func(*selftest.Probe)) []byte {
	t.Helper()
	p := selftest.Probe{Type: selftest.EventType, Run: "r1", Check: check}
	if mod != nil {
		mod(&p)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The handler's injected failures roll back its writes: before commit
// only on the first delivery, between the writes always and permanently.
// Its effects and outgoing events are counted in the tables.
func TestHandlerInjectsFailuresThatRollBack(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, selftest.Migrations())
	h, err := selftest.NewHandler(selftest.Consumer, selftest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string, body []byte, delivery uint64) consumer.Event {
		e := hookbridgetest.NewEvent(selftest.Source, id, selftest.EventType, body)
		e.NumDelivered = delivery
		return e
	}
	failing := probe(t, "failure", func(p *selftest.Probe) { p.FailBeforeCommit = true })
	between := probe(t, "between", func(p *selftest.Probe) { p.FailBetweenWrites = true })
	res := db.ApplyAs(t, selftest.Consumer, h,
		ev("r1-1", probe(t, "first", nil), 1),
		ev("r1-4", failing, 1),
		ev("r1-6", between, 1))
	got := hookbridgetest.Outcomes(res)
	if fmt.Sprint(got) != fmt.Sprint([]consumer.Outcome{consumer.Processed, consumer.Failed, consumer.Failed}) {
		t.Fatalf("outcomes %v (%v)", got, res)
	}
	if consumer.IsPermanent(res[1].Err) || !consumer.IsPermanent(res[2].Err) {
		t.Fatalf("before commit permanent=%t, between writes permanent=%t; want retried and permanent",
			consumer.IsPermanent(res[1].Err), consumer.IsPermanent(res[2].Err))
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge_selftest.effects"); n != 1 {
		t.Fatalf("effects = %d, want 1: a failed apply kept its write", n)
	}
	// The redelivery of the failed event applies it once.
	if out := hookbridgetest.Outcomes(db.ApplyAs(t, selftest.Consumer, h, ev("r1-4", failing, 2))); out[0] != consumer.Processed {
		t.Fatalf("redelivery: %v", out)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge_selftest.effects WHERE event_id = 'r1-4' AND delivery = 2"); n != 1 {
		t.Fatalf("effects of the redelivery = %d, want 1", n)
	}
	db.RequireOutbox(t,
		hookbridgetest.WantOutbox{ID: selftest.OutboxID("r1-1"), Subject: selftest.Subject("r1", "first")},
		hookbridgetest.WantOutbox{ID: selftest.OutboxID("r1-4"), Subject: selftest.Subject("r1", "failure"), Payload: failing})
}

// A planted fault breaks the guarantee where a run can see it; an unknown
// fault is refused.
func TestPlantedFaults(t *testing.T) {
	t.Parallel()
	if _, err := selftest.NewHandler(selftest.Consumer, selftest.Options{Fault: "nope"}); err == nil {
		t.Fatal("unknown fault accepted")
	}
	db := hookbridgetest.Postgres(t, selftest.Migrations())
	for fault, want := range map[string]int{selftest.FaultSkipInbox: 1, selftest.FaultDoubleApply: 0} {
		h, err := selftest.NewHandler(selftest.Consumer, selftest.Options{Fault: fault})
		if err != nil {
			t.Fatal(err)
		}
		id := "r1-" + fault
		e := hookbridgetest.NewEvent(selftest.Source, id, selftest.EventType, probe(t, "failure", func(p *selftest.Probe) { p.FailBeforeCommit = true }))
		db.ApplyAs(t, selftest.Consumer, h, e)
		if n := db.Count(t, "SELECT count(*) FROM hookbridge_selftest.effects WHERE event_id = $1", id); n != want {
			t.Errorf("%s: effects kept after a rollback = %d, want %d", fault, n, want)
		}
	}
	h, _ := selftest.NewHandler(selftest.Consumer, selftest.Options{Fault: selftest.FaultDoubleApply})
	db.ApplyAs(t, selftest.Consumer, h, hookbridgetest.NewEvent(selftest.Source, "r1-d", selftest.EventType, probe(t, "first", nil)))
	if n := db.Count(t, "SELECT count(*) FROM hookbridge_selftest.effects WHERE event_id = 'r1-d'"); n != 2 {
		t.Errorf("double-apply: effects = %d, want 2", n)
	}
}
