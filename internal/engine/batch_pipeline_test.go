package engine_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// TestApplyBatchMatchesApplyOneByOne applies the same mixed batch with
// ApplyBatch in one database and event by event with Apply in another, and
// expects the same outcome for every event and the same rows afterwards:
// new events, an exact repeat, a changed body, a handler that writes and
// then fails, a permanent failure, a retry-later failure and one event
// twice in the batch.
func TestApplyBatchMatchesApplyOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ev := func(id, typ string, body []byte) consumer.Event {
		return consumer.Event{Source: "demo", ID: id, Type: typ, Body: body, BodySHA256: sha256.Sum256(body), StreamSeq: 1, NumDelivered: 1}
	}
	created := func(id, order string, amount int64) consumer.Event {
		return ev(id, orders.Created, orders.WebhookBody(orders.Created, order, amount))
	}
	earlier := []consumer.Event{created("e-dup", "o-dup", 100), created("e-conflict", "o-conflict", 100)}
	batch := []consumer.Event{
		created("e-1", "o-1", 100),
		created("e-dup", "o-dup", 100),                                             // exact repeat: duplicate
		created("e-conflict", "o-conflict", 999),                                   // changed body: conflict
		created("e-boom", "o-boom", 100),                                           // handler writes, then fails
		ev("e-bad", orders.Created, []byte(`{"type":"order.created"}`)),            // permanent
		ev("e-paid", orders.Paid, orders.WebhookBody(orders.Paid, "o-unknown", 1)), // unknown order
		created("e-2", "o-2", 200),
		created("e-2", "o-2", 200),                                          // twice in one batch
		ev("e-3", orders.Paid, orders.WebhookBody(orders.Paid, "o-1", 100)), // pays o-1 of this batch
	}
	boom := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, e consumer.Event) error {
		if err := orders.Handler("orders").Handle(ctx, tx, e); err != nil {
			return err
		}
		if e.ID == "e-boom" {
			return errors.New("injected failure after the handler's writes")
		}
		return nil
	})

	type state struct {
		outcomes []string
		rows     []string
	}
	run := func(batched bool) state {
		db := hookbridgetest.Postgres(t, orders.Migrations())
		for _, e := range earlier {
			if out, err := engine.Apply(ctx, db.Pool, "orders", boom, e); out != consumer.Processed || err != nil {
				t.Fatalf("apply %s: %v %v", e.ID, out, err)
			}
		}
		var s state
		if batched {
			for _, r := range engine.ApplyBatch(ctx, db.Pool, "orders", boom, batch) {
				s.outcomes = append(s.outcomes, describe(r.Outcome, r.Err))
			}
		} else {
			for _, e := range batch {
				out, err := engine.Apply(ctx, db.Pool, "orders", boom, e)
				s.outcomes = append(s.outcomes, describe(out, err))
			}
		}
		for _, q := range []string{
			`SELECT consumer || '/' || source || '/' || event_id || '/' || encode(body_sha256, 'hex') FROM hookbridge.inbox`,
			`SELECT order_id || '/' || status || '/' || version || '/' || paid_cents FROM demo.orders`,
			`SELECT event_id || '/' || subject FROM hookbridge.outbox`,
			`SELECT detected_by || '/' || event_id || '/' || encode(rejected_sha256, 'hex') FROM hookbridge.conflicts`,
		} {
			rows, err := db.Pool.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			s.rows = append(s.rows, strings.Join(got, "\n"))
		}
		return s
	}
	one, batched := run(false), run(true)
	want := []string{"processed", "duplicate", "conflict", "failed: injected", "failed permanent", "failed: unknown order", "processed", "duplicate", "processed"}
	for i := range batch {
		if one.outcomes[i] != want[i] || batched.outcomes[i] != want[i] {
			t.Errorf("event %d (%s): one by one %q, batched %q, want %q", i, batch[i].ID, one.outcomes[i], batched.outcomes[i], want[i])
		}
	}
	for i := range one.rows {
		if one.rows[i] != batched.rows[i] {
			t.Errorf("table %d differs:\none by one:\n%s\nbatched:\n%s", i, one.rows[i], batched.rows[i])
		}
	}
}

// describe reduces an outcome to what must match: the outcome, and for a
// failure whether it is permanent and the innermost cause.
func describe(out consumer.Outcome, err error) string {
	if err == nil {
		return out.String()
	}
	cause := err
	for u := errors.Unwrap(cause); u != nil; u = errors.Unwrap(cause) {
		cause = u
	}
	switch {
	case consumer.IsPermanent(err):
		return fmt.Sprintf("%s permanent", out)
	case strings.Contains(cause.Error(), "injected"):
		return fmt.Sprintf("%s: injected", out)
	case errors.Is(err, orders.ErrUnknownOrder):
		return fmt.Sprintf("%s: unknown order", out)
	}
	return fmt.Sprintf("%s: %v", out, err)
}
