package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/store"
)

// A keyed dead letter that a later event of its ordering key has passed:
// list marks it, show names the key and the event that passed it, requeue
// and `replay --dead-letters` leave it alone (nothing applied, counted in
// the tables) and say how to override, and --out-of-order applies it,
// saying so. An unpassed keyed dead letter replays as before.
func TestPassedDeadLetterCommands(t *testing.T) {
	t.Parallel()
	db, ns, flags := opsEnv(t)
	ctx := context.Background()
	deadLetter := func(id, key string) (int64, uint64) {
		seq := ns.PublishKeyedHook(t, "demo", id, orders.Created, key, orders.WebhookBody(orders.Created, key, 100))
		if err := engine.RecordDeadLetter(ctx, db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo", EventID: id,
			EventType: orders.Created, StreamSeq: seq, Deliveries: 1, Reason: engine.ReasonPermanent, LastError: "broken",
			OrderingKey: key}); err != nil {
			t.Fatal(err)
		}
		var dl int64
		if err := db.Pool.QueryRow(ctx, `SELECT id FROM hookbridge.dead_letters WHERE event_id = $1`, id).Scan(&dl); err != nil {
			t.Fatal(err)
		}
		return dl, seq
	}
	passed, passedSeq := deadLetter("c1", "o-1")
	// The consumer applied a later event of o-1 and marked the dead letter.
	laterSeq := ns.PublishKeyedHook(t, "demo", "u1", orders.Paid, "o-1", orders.WebhookBody(orders.Paid, "o-1", 100))
	if err := store.DeadLetterMarkPassed(ctx, db.Pool, "orders", store.MessageKey{Source: "demo", EventID: "c1", StreamSeq: passedSeq}, "u1", laterSeq); err != nil {
		t.Fatal(err)
	}
	deadLetter("c2", "o-2")
	applied := func(order string) int {
		return db.Count(t, `SELECT count(*) FROM demo.orders WHERE order_id = $1`, order)
	}

	out, err := runOps(t, append([]string{"dead-letters", "list"}, flags...)...)
	if err != nil || !regexpLine(out, fmt.Sprintf(`^%d\s+orders\s.*\sby seq %d\s`, passed, laterSeq)) || !strings.Contains(out, "PASSED: a later event") {
		t.Fatalf("list does not mark the passed dead letter: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"dead-letters", "show", fmt.Sprint(passed)}, flags...)...)
	if err != nil || !regexpLine(out, `^ordering key:?\s+o-1$`) || !strings.Contains(out, fmt.Sprintf("by u1 (stream seq %d) applied at ", laterSeq)) {
		t.Fatalf("show does not name the key and what passed it: %v\n%s", err, out)
	}

	_, err = runOps(t, append([]string{"dead-letters", "requeue", fmt.Sprint(passed)}, flags...)...)
	if err == nil || !strings.Contains(err.Error(), "u1") || !strings.Contains(err.Error(), "--out-of-order") || applied("o-1") != 0 {
		t.Fatalf("requeue of a passed dead letter: %v, o-1 applied %d; want a refusal naming u1 and --out-of-order, nothing applied", err, applied("o-1"))
	}

	out, err = runOps(t, append([]string{"replay", "--consumer", "orders", "--dead-letters", "--dry-run"}, flags...)...)
	if err != nil || !regexpLine(out, `^new\s+2$`) || !strings.Contains(out, "1 of the new are dead letters a later event of their ordering key has passed: the real run leaves them alone") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"replay", "--consumer", "orders", "--dead-letters"}, flags...)...)
	if err != nil || !regexpLine(out, `^processed\s+1$`) || !regexpLine(out, `^skipped: passed\s+1$`) ||
		!regexpLine(out, fmt.Sprintf(`^%d\s+%d\s+demo\s+c1\s.*\su1\s+%d\s`, passed, passedSeq, laterSeq)) {
		t.Fatalf("replay --dead-letters: %v\n%s", err, out)
	}
	if applied("o-1") != 0 || applied("o-2") != 1 {
		t.Fatalf("after the replay o-1 applied %d, o-2 %d; want 0 and 1", applied("o-1"), applied("o-2"))
	}

	out, err = runOps(t, append([]string{"dead-letters", "requeue", fmt.Sprint(passed), "--out-of-order"}, flags...)...)
	if err != nil || !strings.Contains(out, "requeued") || !strings.Contains(out, "OUT OF ORDER") || applied("o-1") != 1 {
		t.Fatalf("requeue --out-of-order: %v, o-1 applied %d\n%s", err, applied("o-1"), out)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL`); n != 0 {
		t.Fatalf("%d dead letters unresolved, want 0", n)
	}
	if _, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--from-seq", "1", "--out-of-order"}, flags...)...); err == nil {
		t.Fatal("--out-of-order without --dead-letters was accepted")
	}
}
