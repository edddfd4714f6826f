package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The demo handler postpones an order.paid whose order does not exist
// yet. These tests send paid before created, and check the order ends
// paid, once, with no dead letter, whatever max_deliver says (a
// postponement is not a failure).

// runOrders runs the demo orders consumer as a member with its own NATS
// connection; partitions 0 is the unkeyed consumer.
func runOrders(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, partitions int, set func(*engine.Options)) {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	opts := engine.Options{
		Name: "orders", EventTypes: []string{"order.created", "order.paid", "order.cancelled"}, Handler: orders.Handler("orders"),
		Partitions: partitions, MaxDeliver: 2, Backoff: []time.Duration{time.Hour},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if set != nil {
		set(&opts)
	}
	c, err := engine.New(db.Pool, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; nc.Close() })
}

func publishOrder(t *testing.T, ns *hookbridgetest.JetStream, keyed bool, id, typ, order string) {
	t.Helper()
	body := orders.WebhookBody(typ, order, 500)
	if keyed {
		ns.PublishKeyedHook(t, "demo", id, typ, order, body)
	} else {
		ns.PublishHook(t, "demo", id, typ, body)
	}
}

// awaitOrders waits until want orders are paid at version 2, then checks
// that nothing was dead-lettered and nothing is left postponed.
func awaitOrders(t *testing.T, db *hookbridgetest.Database, want int) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, fmt.Sprintf("%d orders paid at version 2", want), func() bool {
		return db.Count(t, `SELECT count(*) FROM demo.orders WHERE status = 'paid' AND version = 2`) == want ||
			db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) > 0
	})
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters, want none: a postponed event is not a failure", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM demo.orders WHERE status = 'paid' AND version = 2`); n != want {
		t.Fatalf("%d orders paid at version 2, want %d", n, want)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.inbox`); n != 2*want {
		t.Fatalf("%d inbox rows, want %d (each event applied once)", n, 2*want)
	}
	hookbridgetest.Eventually(t, time.Minute, "no postponement left", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures`) == 0
	})
}

// Keyed, two members: paid before created ends paid. The backoff is an
// hour and the wait a minute, so a paid event applies only when it is
// retried right after its created one, never after its backoff; and
// max_deliver 2 would dead-letter it were its postponements failures.
// Either every paid event is postponed before any created one is sent
// (each waits alone, blocked), or each is sent just before its created
// one (the two usually meet in one batch).
func TestPostponedEventAppliesRightAfterTheLaterOne(t *testing.T) {
	t.Parallel()
	for _, waitAll := range []bool{true, false} {
		t.Run(fmt.Sprintf("all-postponed-first=%v", waitAll), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, orders.Migrations())
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			runOrders(t, db, ns, stream.DefaultPartitions, nil)
			runOrders(t, db, ns, stream.DefaultPartitions, nil)
			awaitMembersSplit(t, ns, "orders", 2)
			const n = 100
			for i := range n {
				order := fmt.Sprintf("o-%d", i)
				publishOrder(t, ns, true, order+"-paid", "order.paid", order)
				if !waitAll {
					publishOrder(t, ns, true, order+"-created", "order.created", order)
				}
			}
			if waitAll {
				hookbridgetest.Eventually(t, time.Minute, "every paid event postponed", func() bool {
					return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE postponed_since IS NOT NULL AND failures = 0`) == n
				})
				// What status shows apart from the failing messages.
				if _, got, err := store.FailureCountByConsumer(context.Background(), db.Pool); err != nil || got["orders"] != n {
					t.Fatalf("postponed by consumer %v, %v; want orders: %d", got, err, n)
				}
				for i := range n {
					order := fmt.Sprintf("o-%d", i)
					publishOrder(t, ns, true, order+"-created", "order.created", order)
				}
			}
			awaitOrders(t, db, n)
		})
	}
}

// Several events wait for one: a paid and a cancelled event postponed, then the
// created one; each applies once, in the order the handler allows.
func TestPostponedEventsOfOneKeyAllApply(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	runOrders(t, db, ns, stream.DefaultPartitions, func(o *engine.Options) { o.BatchSize = 1 })
	publishOrder(t, ns, true, "p", "order.paid", "o-1")
	publishOrder(t, ns, true, "x", "order.cancelled", "o-1")
	hookbridgetest.Eventually(t, time.Minute, "both postponed", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE postponed_since IS NOT NULL`) == 2
	})
	publishOrder(t, ns, true, "c", "order.created", "o-1")
	hookbridgetest.Eventually(t, time.Minute, "all three applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == 3
	})
	if n := db.Count(t, `SELECT version FROM demo.orders WHERE order_id = 'o-1'`); n != 3 {
		t.Fatalf("order at version %d, want 3", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// Unkeyed, no order is kept: a postponed event is retried after its
// backoff and does not count toward max_deliver.
func TestPostponedUnkeyedEventRetriesAfterItsBackoff(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	runOrders(t, db, ns, 0, func(o *engine.Options) {
		o.MaxDeliver = 1
		o.Backoff = []time.Duration{50 * time.Millisecond}
	})
	publishOrder(t, ns, false, "o-1-paid", "order.paid", "o-1")
	hookbridgetest.Eventually(t, time.Minute, "the paid event postponed", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE postponed_since IS NOT NULL`) == 1
	})
	publishOrder(t, ns, false, "o-1-created", "order.created", "o-1")
	awaitOrders(t, db, 1)
}

// An event postponed for longer than postpone_limit is dead-lettered,
// with the reason, and its key goes on.
func TestPostponedPastItsLimitIsDeadLettered(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	runOrders(t, db, ns, stream.DefaultPartitions, func(o *engine.Options) {
		o.PostponeLimit = 300 * time.Millisecond
		o.Backoff = []time.Duration{100 * time.Millisecond}
	})
	publishOrder(t, ns, true, "o-1-paid", "order.paid", "o-1")
	hookbridgetest.Eventually(t, time.Minute, "the paid event dead-lettered as postponed too long", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE reason = $1 AND event_id = 'o-1-paid'`, engine.ReasonPostponed) == 1
	})
	publishOrder(t, ns, true, "o-1-created", "order.created", "o-1")
	hookbridgetest.Eventually(t, time.Minute, "the key goes on", func() bool {
		return db.Count(t, `SELECT count(*) FROM demo.orders WHERE order_id = 'o-1' AND status = 'created'`) == 1
	})
}
