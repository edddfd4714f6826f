package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestHandlerPanicFailsOnlyThatDelivery: a panicking handler is a failed
// delivery (rolled back, redelivered), not a message stuck in progress or
// a crashed process; the redelivery applies the event once.
func TestHandlerPanicFailsOnlyThatDelivery(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		var calls atomic.Int32
		inner := orders.Handler("panicky")
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if calls.Add(1) == 1 {
				var m map[string]int
				m["boom"]++ // a nil-map write: the kind of bug that panics
			}
			return inner.Handle(ctx, tx, ev)
		})
		startConsumer(t, db, ns, bs, engine.Options{Name: "panicky", EventTypes: []string{orders.Created}, Handler: h,
			Backoff: []time.Duration{20 * time.Millisecond}, AckWait: time.Second})
		ns.PublishHook(t, "demo", "e1", orders.Created, orders.WebhookBody(orders.Created, "o1", 10))
		hookbridgetest.Eventually(t, time.Minute, "order applied after the panic", func() bool {
			return db.Count(t, "SELECT count(*) FROM demo.orders") == 1
		})
		awaitSettled(t, ns, "panicky") // acked: no delivery is left to come
		if got := calls.Load(); got != 2 {
			t.Fatalf("handler ran %d times, want 2 (panicked once, applied once)", got)
		}
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 1 {
			t.Fatalf("inbox rows = %d, want 1", n)
		}
	})
}

// TestTimedOutEventIsDeadLettered: an event that always outlives
// HandlerTimeout ends in dead letters at max_deliver; the expired apply
// deadline must not make the database look unreachable.
func TestTimedOutEventIsDeadLettered(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t)
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		var calls atomic.Int32
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			calls.Add(1)
			_, err := tx.Exec(ctx, "SELECT pg_sleep(60)")
			return err
		})
		// The timeout leaves a loaded machine room to begin the
		// transaction and claim the event before it (else an attempt ends
		// before the handler runs), and the ping after it room to answer
		// (else the failure counts as the database's, not the event's).
		startConsumer(t, db, ns, bs, engine.Options{Name: "slow", EventTypes: []string{"thing.slow"}, Handler: h,
			HandlerTimeout: 2 * time.Second, MaxDeliver: 2, Backoff: []time.Duration{20 * time.Millisecond}})
		ns.PublishHook(t, "demo", "e1", "thing.slow", []byte(`{}`))
		hookbridgetest.Eventually(t, time.Minute, "dead letter", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE reason = 'max_deliver'") == 1
		})
		awaitSettled(t, ns, "slow") // terminated: no delivery is left to come
		if got := calls.Load(); got != 2 {
			t.Fatalf("handler ran %d times, want 2 (max_deliver)", got)
		}
	})
}

// TestSlowEventDoesNotFailItsBatch: with batches, one event that breaks
// the shared transaction (here by timing out) fails alone; the others of
// its batch are applied.
func TestSlowEventDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		inner := orders.Handler("batched")
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if ev.ID == "slow" {
				if _, err := tx.Exec(ctx, "SELECT pg_sleep(5)"); err != nil {
					return err
				}
			}
			return inner.Handle(ctx, tx, ev)
		})
		startConsumer(t, db, ns, bs, engine.Options{Name: "batched", EventTypes: []string{orders.Created}, Handler: h,
			BatchWait: 200 * time.Millisecond, Concurrency: 1,
			// After a timeout the consumer pings the database within the
			// handler timeout to tell a slow event from a hung database; on
			// a loaded machine 300 ms was sometimes too short for that ping.
			HandlerTimeout: time.Second, MaxDeliver: -1, Backoff: []time.Duration{time.Minute}})
		for _, id := range []string{"slow", "ok1", "ok2"} {
			ns.PublishHook(t, "demo", id, orders.Created, orders.WebhookBody(orders.Created, "order-"+id, 1))
		}
		hookbridgetest.Eventually(t, time.Minute, "the two good events applied", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE event_id IN ('ok1', 'ok2')") == 2
		})
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'slow'"); n != 0 {
			t.Fatalf("the slow event was applied %d times; want 0 (it always times out)", n)
		}
	})
}

// TestDeletedDurableConsumerIsRecreated: if the durable consumer vanishes
// from JetStream (an operator, a lost stream), Run re-creates it and goes
// on applying instead of returning silently.
func TestDeletedDurableConsumerIsRecreated(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		startConsumer(t, db, ns, bs, engine.Options{Name: "phoenix", EventTypes: []string{orders.Created},
			Handler: orders.Handler("phoenix"), Backoff: []time.Duration{20 * time.Millisecond}})
		ns.PublishHook(t, "demo", "e1", orders.Created, orders.WebhookBody(orders.Created, "o1", 1))
		hookbridgetest.Eventually(t, time.Minute, "first event", func() bool {
			return db.Count(t, "SELECT count(*) FROM demo.orders") == 1
		})
		if err := ns.JS.DeleteConsumer(context.Background(), stream.Hooks, "phoenix"); err != nil {
			t.Fatal(err)
		}
		ns.PublishHook(t, "demo", "e2", orders.Created, orders.WebhookBody(orders.Created, "o2", 1))
		hookbridgetest.Eventually(t, time.Minute, "event after the durable was deleted", func() bool {
			return db.Count(t, "SELECT count(*) FROM demo.orders") == 2
		})
		// The re-created durable starts from the beginning: e1 comes back and
		// is a duplicate, so nothing is applied twice.
		awaitSettled(t, ns, "phoenix")
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 2 {
			t.Fatalf("inbox rows = %d, want 2", n)
		}
		if n := db.Count(t, "SELECT count(*) FROM demo.orders WHERE version <> 1"); n != 0 {
			t.Fatalf("%d orders were changed twice", n)
		}
	})
}
