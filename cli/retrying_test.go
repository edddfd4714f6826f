package cli

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// While an event is being retried, status names it with its failure count
// and last error (not only REDELIVERED 1), and events show gives both;
// they come from hookbridge.delivery_failures, which serve writes.
func TestStatusAndEventsShowNameARetryingEvent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	addr, dataDir := startServe(t, db)
	flags := []string{"--database-url", db.URL, "--data-dir", dataDir, "--http-addr", addr}
	// Paid before it was created: the orders handler retries it.
	code, out, errOut := runMain(t, append([]string{"send", "--id", "evt-early", "--type", orders.Paid,
		"--data", `{"order_id":"o-late","amount_cents":500,"currency":"EUR"}`}, flags...)...)
	if code != 0 {
		t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
	}
	hookbridgetest.Eventually(t, time.Minute, "a failure counted", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'evt-early'`) == 1
	})

	// The durable's figures follow the failure's nak in their own time.
	want := []string{`^RETRYING: 1 event\(s\) failing now`, `^orders\s+demo\s+evt-early\s+1\s+[1-9]\d*\s+\S+\s+.*unknown order`,
		`^HOOKS\s+orders\s+\d+\s+\d+\s+\d+\s+1\s`}
	var err error
	hookbridgetest.Eventually(t, time.Minute, "status with the retrying event", func() bool {
		out, err = runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && !slices.ContainsFunc(want, func(re string) bool { return !regexpLine(out, re) })
	})
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, re := range want {
		if !regexpLine(out, re) {
			t.Errorf("status lacks %s:\n%s", re, out)
		}
	}
	out, err = runOps(t, append([]string{"events", "show", "demo", "evt-early"}, flags...)...)
	if err != nil || !regexpLine(out, `^orders\s+redelivered\s+1\s+-\s+-\s+[1-9]\d*\s+\S+\s+.*unknown order`) {
		t.Fatalf("events show: %v\n%s", err, out)
	}

	// The operator restores the missing order: the retry applies the
	// event, and it is no longer listed. (Its order.created would not
	// help: it waits behind the payment, in the order's order.)
	restoreOrder(t, db, "o-late")
	hookbridgetest.Eventually(t, 2*time.Minute, "the retried event applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'evt-early'`) == 1
	})
	// The ack follows the commit the inbox row shows.
	hookbridgetest.Eventually(t, time.Minute, "status with the event acked", func() bool {
		out, err = runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && !regexpLine(out, `^RETRYING:`) && regexpLine(out, `^HOOKS\s+orders\s+0\s+0\s+\d+\s+0\s`)
	})
	if err != nil || regexpLine(out, `^RETRYING:`) || !regexpLine(out, `^HOOKS\s+orders\s+0\s+0\s+\d+\s+0\s`) {
		t.Fatalf("status once applied: %v\n%s", err, out)
	}
}

// restoreOrder writes the order row an operator restores, so that an
// event retried for want of it applies.
func restoreOrder(t *testing.T, db *hookbridgetest.Database, orderID string) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO demo.orders (order_id, status, amount_cents, currency, created_event_id, last_event_id)
		VALUES ($1, 'created', 500, 'EUR', 'restored', 'restored')`, orderID); err != nil {
		t.Fatal(err)
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
