package ops_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// What an event's handler said at its last attempt
// (postponedStatusHandler).
const (
	sayPostpone int32 = iota
	sayFail
)

// An event is shown as what it is at its last attempt, in status (listed
// and counted) and in events show: postponed (it waits for a later event
// of its key and holds none of them), or failing (it holds its key and
// counts toward max_deliver). One postponed, then failing, is failing;
// failing, then postponed, is postponed, its failures shown with it.
func TestStatusShowsAnEventAsItsLastAttempt(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	var say atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if say.Load() == sayPostpone {
			return consumer.Postpone(errors.New("needs a later event"))
		}
		return errors.New("fails for now")
	})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := &ops.Ops{Pool: db.Pool, JS: ns.JS, Consumers: []ops.Consumer{{Name: "keyed", Handler: h, EventTypes: []string{"thing.done"}}},
		Logger: logger}
	// A short backoff, so that the event is tried again and again with no
	// later event of its key.
	c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "keyed", EventTypes: []string{"thing.done"}, Handler: h,
		Partitions: stream.DefaultPartitions, MaxDeliver: 1000, Backoff: []time.Duration{20 * time.Millisecond}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ns.PublishKeyedHook(t, "demo", "e1", "thing.done", "k1", []byte(`{}`))

	check := func(step string, postponed bool) {
		t.Helper()
		st, err := o.Status(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		listed, counted := st.Retrying, st.RetryingByConsumer["keyed"]
		if postponed {
			listed, counted = st.Postponed, st.PostponedByConsumer["keyed"]
		}
		if len(listed) != 1 || listed[0].EventID != "e1" || counted != 1 || len(st.Retrying)+len(st.Postponed) != 1 ||
			st.RetryingByConsumer["keyed"]+st.PostponedByConsumer["keyed"] != 1 {
			t.Fatalf("%s: status lists retrying %+v (%v), postponed %+v (%v); want e1 %s only", step,
				st.Retrying, st.RetryingByConsumer, st.Postponed, st.PostponedByConsumer, map[bool]string{false: "failing", true: "postponed"}[postponed])
		}
		if (listed[0].PostponedSince != nil) != postponed {
			t.Fatalf("%s: postponed since %v", step, listed[0].PostponedSince)
		}
		life, err := o.EventLife(context.Background(), "demo", "e1")
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{false: ops.EventRedelivered, true: ops.EventPostponed}[postponed]
		if len(life.Consumers) != 1 || life.Consumers[0].State != want {
			t.Fatalf("%s: events show %+v, want state %s", step, life.Consumers, want)
		}
	}
	hookbridgetest.Eventually(t, time.Minute, "e1 postponed", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE postponed_since IS NOT NULL`) == 1
	})
	check("postponed", true)

	say.Store(sayFail)
	hookbridgetest.Eventually(t, time.Minute, "e1 failing after its postponement", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE failures >= 2`) == 1
	})
	check("postponed, then failing", false)

	say.Store(sayPostpone)
	hookbridgetest.Eventually(t, time.Minute, "e1 postponed after its failures", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE failures >= 2 AND postponed_since IS NOT NULL`) == 1
	})
	check("failing, then postponed", true)
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}
