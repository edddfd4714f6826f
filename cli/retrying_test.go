package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// While an event is being retried, status names it with its failure count
// and last error (not only REDELIVERED 1), and events show gives both;
// they come from hookbridge.delivery_failures, which serve writes. The
// demo handler postpones a payment of an order it does not know (it needs
// the order's order.created): both say so, and once the order.created
// comes, the payment applies right after it and is listed no more.
func TestStatusAndEventsShowNameARetryingEvent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	addr, dataDir := startServe(t, db)
	flags := []string{"--database-url", db.URL, "--data-dir", dataDir, "--http-addr", addr}
	send := func(id, typ string) {
		t.Helper()
		code, out, errOut := runMain(t, append([]string{"send", "--id", id, "--type", typ,
			"--data", `{"order_id":"o-late","amount_cents":500,"currency":"EUR"}`}, flags...)...)
		if code != 0 {
			t.Fatalf("send %s: exit %d\n%s%s", id, code, out, errOut)
		}
	}
	send("evt-early", orders.Paid) // paid before it was created
	hookbridgetest.Eventually(t, time.Minute, "a postponement recorded", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'evt-early' AND postponed_since IS NOT NULL`) == 1
	})

	// The durable's figures follow in their own time. A postponed event is
	// not failing: it is listed and counted as postponed, with the time
	// it was first postponed, and not under RETRYING.
	want := []string{`^POSTPONED: 1 event\(s\) waiting for a later event of their key`,
		`^orders\s+demo\s+evt-early\s+1\s+\d{4}-\S+Z\s+\d+s\s+0\s+.*unknown order`, `^HOOKS\s+orders\s+\d+\s+\d+\s+\d+\s+0\s+1\s`}
	var out string
	var err error
	hookbridgetest.Eventually(t, time.Minute, "status with the postponed event", func() bool {
		out, err = runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && !slices.ContainsFunc(want, func(re string) bool { return !regexpLine(out, re) })
	})
	for _, re := range want {
		if !regexpLine(out, re) {
			t.Errorf("status lacks %s:\n%s", re, out)
		}
	}
	if regexpLine(out, `^RETRYING:`) {
		t.Errorf("status counts the postponed event as failing:\n%s", out)
	}
	out, err = runOps(t, append([]string{"status", "--json"}, flags...)...)
	var st ops.Status
	if err != nil || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(st.Retrying) != 0 || len(st.RetryingByConsumer) != 0 || len(st.Postponed) != 1 || st.PostponedByConsumer["orders"] != 1 ||
		st.Postponed[0].EventID != "evt-early" || st.Postponed[0].PostponedSince == nil {
		t.Fatalf("status --json: retrying %+v %v, postponed %+v %v", st.Retrying, st.RetryingByConsumer, st.Postponed, st.PostponedByConsumer)
	}
	out, err = runOps(t, append([]string{"events", "show", "demo", "evt-early"}, flags...)...)
	if err != nil || !regexpLine(out, `^orders\s+postponed\s+1\s+-\s+-\s+-\s+\d{4}-\S+Z\s+\S+\s+.*unknown order`) {
		t.Fatalf("events show: %v\n%s", err, out)
	}

	send("evt-created", orders.Created)
	hookbridgetest.Eventually(t, 2*time.Minute, "the postponed event applied after its order.created", func() bool {
		return db.Count(t, `SELECT count(*) FROM demo.orders WHERE order_id = 'o-late' AND status = 'paid' AND version = 2`) == 1
	})
	hookbridgetest.Eventually(t, time.Minute, "status with the event acked", func() bool {
		out, err = runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && !regexpLine(out, `^(RETRYING|POSTPONED):`) && regexpLine(out, `^HOOKS\s+orders\s+0\s+0\s+\d+\s+0\s+0\s`)
	})
	if err != nil || regexpLine(out, `^(RETRYING|POSTPONED):`) || !regexpLine(out, `^HOOKS\s+orders\s+0\s+0\s+\d+\s+0\s+0\s`) {
		t.Fatalf("status once applied: %v\n%s", err, out)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// An event's life lists its dead letters and conflicts by the ids the
// dead-letters and conflicts commands take, resolved ones too: once an
// operator requeued or resolved them they are still its history.
func TestEventsShowLinksResolvedDeadLettersAndConflicts(t *testing.T) {
	t.Parallel()
	db, ns, flags := opsEnv(t)
	ctx := context.Background()
	seq := ns.PublishHook(t, "demo", "c1", orders.Created, orders.WebhookBody(orders.Created, "o1", 100))
	if _, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--event-id", "c1"}, flags...)...); err != nil {
		t.Fatal(err)
	}
	if err := engine.RecordDeadLetter(ctx, db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo", EventID: "c1",
		EventType: orders.Created, StreamSeq: seq, Deliveries: 1, Reason: engine.ReasonPermanent, LastError: "x"}); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return engine.RecordConflict(ctx, tx, engine.ConflictRecord{DetectedBy: "orders", Source: "demo", EventID: "c1", RejectedBody: []byte("other")})
	})
	if err != nil {
		t.Fatal(err)
	}
	var dl, cf int64
	if err := db.Pool.QueryRow(ctx, `UPDATE hookbridge.dead_letters SET resolved_at = now(), resolution = 'requeued' RETURNING id`).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `UPDATE hookbridge.conflicts SET resolved_at = now(), resolution = 'sender bug' RETURNING id`).Scan(&cf); err != nil {
		t.Fatal(err)
	}
	out, err := runOps(t, append([]string{"events", "show", "demo", "c1"}, flags...)...)
	if err != nil {
		t.Fatalf("events show: %v\n%s", err, out)
	}
	for _, re := range []string{`^orders\s+processed\s`, fmt.Sprintf(`^%d\s+orders\s+%d\s+\S+ \(requeued\)$`, dl, seq),
		fmt.Sprintf(`^%d\s+orders\s+-\s+\S+\s+\S+ \(sender bug\)$`, cf)} {
		if !regexpLine(out, re) {
			t.Errorf("events show lacks %s:\n%s", re, out)
		}
	}
}
