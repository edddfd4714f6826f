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
	"github.com/hookbridge/hookbridge/internal/stream"
)

var orderTypes = []string{orders.Created, orders.Paid, orders.Cancelled}

func replay(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, o engine.ReplayOptions) engine.ReplaySummary {
	t.Helper()
	if o.Consumer == "" {
		o.Consumer = "orders"
	}
	if o.Handler == nil && !o.DryRun {
		o.Handler = orders.Handler(o.Consumer)
	}
	if o.EventTypes == nil {
		o.EventTypes = orderTypes
	}
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	sum, err := engine.Replay(context.Background(), db.Pool, ns.JS, o)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	return sum
}

// tableCounts is a fingerprint of every table a replay could change.
func tableCounts(t *testing.T, db *hookbridgetest.Database) string {
	t.Helper()
	return fmt.Sprintf("inbox=%d orders=%d versions=%d outbox=%d conflicts=%d dead=%d unresolved=%d",
		db.Count(t, "SELECT count(*) FROM hookbridge.inbox"),
		db.Count(t, "SELECT count(*) FROM demo.orders"),
		db.Count(t, "SELECT coalesce(sum(version), 0) FROM demo.orders"),
		db.Count(t, "SELECT count(*) FROM hookbridge.outbox"),
		db.Count(t, "SELECT count(*) FROM hookbridge.conflicts"),
		db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters"),
		db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL"))
}

// order.paid arrives before order.created: it is retried on the schedule,
// dead-lettered after max_deliver, and applied exactly once by a replay of
// the dead letters once the order exists. A second replay does nothing.
func TestReplayDeadLetterAppliesOnceAfterCause(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		startConsumer(t, db, ns, bs, ordersOptions("orders", 3))

		paySeq := ns.PublishHook(t, "demo", "pay-1", orders.Paid, orders.WebhookBody(orders.Paid, "o1", 100))
		hookbridgetest.Eventually(t, time.Minute, "dead letter", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE deliveries = 3") == 1
		})
		if n := db.Count(t, "SELECT count(*) FROM demo.orders"); n != 0 {
			t.Fatalf("orders = %d before order.created", n)
		}
		ns.PublishHook(t, "demo", "create-1", orders.Created, orders.WebhookBody(orders.Created, "o1", 100))
		hookbridgetest.Eventually(t, time.Minute, "order created", func() bool {
			return db.Count(t, "SELECT count(*) FROM demo.orders WHERE status = 'created'") == 1
		})

		before := tableCounts(t, db)
		dry := replay(t, db, ns, engine.ReplayOptions{DeadLetters: true, DryRun: true})
		if dry.Selected != 1 || dry.New != 1 || dry.Processed != 0 || dry.Resolved != 0 {
			t.Fatalf("dry run summary = %+v, want 1 new", dry)
		}
		if after := tableCounts(t, db); after != before {
			t.Fatalf("dry run changed rows: %s -> %s", before, after)
		}

		var items []engine.ReplayItem
		sum := replay(t, db, ns, engine.ReplayOptions{DeadLetters: true, Report: func(it engine.ReplayItem) { items = append(items, it) }})
		if sum.Selected != 1 || sum.Processed != 1 || sum.Resolved != 1 || sum.Failed != 0 {
			t.Fatalf("replay summary = %+v, want 1 processed and resolved", sum)
		}
		if len(items) != 1 || items[0].Seq != paySeq || items[0].EventID != "pay-1" || !items[0].Resolved {
			t.Fatalf("items = %+v", items)
		}
		if n := db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o1' AND version = 2 AND status = 'paid' AND paid_cents = 100"); n != 1 {
			t.Fatalf("order o1 not paid exactly once: %s", tableCounts(t, db))
		}
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NOT NULL AND resolution = 'replayed'"); n != 1 {
			t.Fatalf("resolved dead letters = %d, want 1", n)
		}
		want := "inbox=2 orders=1 versions=2 outbox=2 conflicts=0 dead=1 unresolved=0"
		if got := tableCounts(t, db); got != want {
			t.Fatalf("after replay: %s, want %s", got, want)
		}

		again := replay(t, db, ns, engine.ReplayOptions{DeadLetters: true})
		if again.Selected != 0 || again.Processed != 0 {
			t.Fatalf("second replay summary = %+v, want nothing", again)
		}
		// The whole stream again: both events are duplicates now.
		all := replay(t, db, ns, engine.ReplayOptions{})
		if all.Selected != 2 || all.Duplicate != 2 || all.Processed != 0 {
			t.Fatalf("range replay summary = %+v, want 2 duplicates", all)
		}
		if got := tableCounts(t, db); got != want {
			t.Fatalf("after second replays: %s, want %s", got, want)
		}
	})
}

// A range replay over 500 applied events finds 500 duplicates and changes
// no row; the selectors narrow it by sequence, time, type and event id.
func TestReplayRangeOfAppliedEventsIsAllDuplicates(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		const n = 250 // orders; each has order.created and order.paid
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		opts := ordersOptions("orders", 0)
		startConsumer(t, db, ns, bs, opts)
		for i := range n {
			id := fmt.Sprintf("o%03d", i)
			ns.PublishHook(t, "demo", "c-"+id, orders.Created, orders.WebhookBody(orders.Created, id, 100))
		}
		hookbridgetest.Eventually(t, time.Minute, "orders created", func() bool {
			return db.Count(t, "SELECT count(*) FROM demo.orders") == n
		})
		time.Sleep(10 * time.Millisecond) // stream timestamps of the two halves differ
		between := time.Now()
		var firstPaySeq uint64
		for i := range n {
			id := fmt.Sprintf("o%03d", i)
			seq := ns.PublishHook(t, "demo", "p-"+id, orders.Paid, orders.WebhookBody(orders.Paid, id, 100))
			if i == 0 {
				firstPaySeq = seq
			}
		}
		hookbridgetest.Eventually(t, time.Minute, "orders paid", func() bool {
			return db.Count(t, "SELECT count(*) FROM demo.orders WHERE status = 'paid'") == n
		})
		want := fmt.Sprintf("inbox=%d orders=%d versions=%d outbox=%d conflicts=0 dead=0 unresolved=0", 2*n, n, 2*n, 2*n)
		if got := tableCounts(t, db); got != want {
			t.Fatalf("before replay: %s, want %s", got, want)
		}

		sum := replay(t, db, ns, engine.ReplayOptions{})
		if sum.Selected != 2*n || sum.Duplicate != 2*n || sum.Processed+sum.Failed+sum.Conflict != 0 {
			t.Fatalf("summary = %+v, want %d duplicates", sum, 2*n)
		}
		if got := tableCounts(t, db); got != want {
			t.Fatalf("after replay: %s, want %s", got, want)
		}

		cases := []struct {
			name string
			o    engine.ReplayOptions
			want int
		}{
			{"seq range", engine.ReplayOptions{FromSeq: 101, ToSeq: 200}, 100},
			{"from seq", engine.ReplayOptions{FromSeq: firstPaySeq}, n},
			{"since", engine.ReplayOptions{Since: between}, n},
			{"until", engine.ReplayOptions{Until: between}, n},
			{"type", engine.ReplayOptions{Type: orders.Paid}, n},
			{"type and seq", engine.ReplayOptions{Type: orders.Created, FromSeq: 201}, n - 200},
			{"event id", engine.ReplayOptions{EventID: "p-o007"}, 1},
			{"other consumer types", engine.ReplayOptions{EventTypes: []string{orders.Cancelled}}, 0},
			{"dry run", engine.ReplayOptions{DryRun: true}, 2 * n},
		}
		for _, c := range cases {
			sum := replay(t, db, ns, c.o)
			if sum.Selected != c.want || sum.Duplicate != c.want {
				t.Errorf("%s: summary = %+v, want %d duplicates", c.name, sum, c.want)
			}
		}
		if got := tableCounts(t, db); got != want {
			t.Fatalf("after selective replays: %s, want %s", got, want)
		}
	})
}

// --dry-run classifies new, duplicate and conflicting events from the inbox
// without writing; the real replay then does exactly what it announced.
func TestReplayDryRunReportsWithoutApplying(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	ns.PublishHook(t, "demo", "c1", orders.Created, orders.WebhookBody(orders.Created, "o1", 100))
	ns.PublishHook(t, "demo", "c2", orders.Created, orders.WebhookBody(orders.Created, "o2", 200))
	// The same event id again with another body, past the duplicate window
	// (another Nats-Msg-Id): a conflict once c1 is applied.
	msg := nats.NewMsg(stream.HookSubject("demo", orders.Created))
	msg.Data = orders.WebhookBody(orders.Created, "o1", 999)
	msg.Header.Set(stream.HeaderSource, "demo")
	msg.Header.Set(stream.HeaderEventID, "c1")
	msg.Header.Set(stream.HeaderEventType, orders.Created)
	if _, err := ns.JS.PublishMsg(context.Background(), msg, jetstream.WithMsgID("demo:c1-resent")); err != nil {
		t.Fatal(err)
	}
	if s := replay(t, db, ns, engine.ReplayOptions{EventID: "c1", ToSeq: 1}); s.Processed != 1 {
		t.Fatalf("apply c1: %+v", s)
	}

	before := tableCounts(t, db)
	outcomes := map[uint64]string{}
	dry := replay(t, db, ns, engine.ReplayOptions{DryRun: true, Report: func(it engine.ReplayItem) { outcomes[it.Seq] = it.Outcome.String() }})
	if dry.Selected != 3 || dry.New != 1 || dry.Duplicate != 1 || dry.Conflict != 1 || dry.Processed != 0 {
		t.Fatalf("dry run summary = %+v, want 1 new, 1 duplicate, 1 conflict", dry)
	}
	if outcomes[1] != "duplicate" || outcomes[2] != "new" || outcomes[3] != "conflict" {
		t.Fatalf("dry run outcomes = %v", outcomes)
	}
	if after := tableCounts(t, db); after != before {
		t.Fatalf("dry run changed rows: %s -> %s", before, after)
	}

	sum := replay(t, db, ns, engine.ReplayOptions{})
	if sum.Processed != 1 || sum.Duplicate != 1 || sum.Conflict != 1 {
		t.Fatalf("replay summary = %+v, want what the dry run said", sum)
	}
	want := "inbox=2 orders=2 versions=2 outbox=2 conflicts=1 dead=0 unresolved=0"
	if got := tableCounts(t, db); got != want {
		t.Fatalf("after replay: %s, want %s", got, want)
	}
}

// A dead letter whose message left the stream is reported missing and
// stays unresolved.
func TestReplayMissingDeadLetter(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	seq := ns.PublishHook(t, "demo", "pay-1", orders.Paid, orders.WebhookBody(orders.Paid, "o1", 100))
	err := engine.RecordDeadLetter(context.Background(), db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo",
		EventID: "pay-1", EventType: orders.Paid, StreamSeq: seq, Deliveries: 3, Reason: engine.ReasonMaxDeliver, LastError: "x"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ns.JS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(context.Background(), seq); err != nil {
		t.Fatal(err)
	}
	sum := replay(t, db, ns, engine.ReplayOptions{DeadLetters: true})
	if sum.Selected != 1 || sum.Missing != 1 || sum.Resolved != 0 {
		t.Fatalf("summary = %+v, want 1 missing", sum)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL"); n != 1 {
		t.Fatalf("unresolved = %d, want 1", n)
	}
}
