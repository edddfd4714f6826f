package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// numAckPending reads the durable consumer's unacknowledged and
// redelivered counts from the server.
func numAckPending(t *testing.T, ns *hookbridgetest.JetStream, name string) (ackPending int, redelivered int) {
	t.Helper()
	c, err := ns.JS.Consumer(context.Background(), stream.Hooks, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatalf("consumer %s info: %v", name, err)
	}
	return info.NumAckPending, info.NumRedelivered
}

func TestPermanentErrorIsDeadLetteredOnFirstDelivery(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t)
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		calls := 0
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			calls++
			return consumer.Permanent(errors.New("amount is negative"))
		})
		startConsumer(t, db, ns, bs, engine.Options{Name: "strict", EventTypes: []string{"thing.done"}, Handler: h,
			MaxDeliver: 5, Backoff: []time.Duration{20 * time.Millisecond}})
		seq := ns.PublishHook(t, "demo", "e1", "thing.done", []byte(`{"x":1}`))

		hookbridgetest.Eventually(t, time.Minute, "dead letter", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters") == 1
		})
		// The message is terminated after its dead letter is recorded;
		// once it is, no (wrong) redelivery can come any more.
		awaitSettled(t, ns, "strict")
		if calls != 1 {
			t.Fatalf("handler ran %d times, want 1", calls)
		}
		dls, err := engine.ListDeadLetters(context.Background(), db.Pool, engine.DeadLetterFilter{Consumer: "strict"})
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != 1 {
			t.Fatalf("dead letters = %d, want 1", len(dls))
		}
		d := dls[0]
		if d.Deliveries != 1 || d.Reason != engine.ReasonPermanent || d.StreamSeq != seq || d.EventID != "e1" ||
			d.Source != "demo" || d.EventType != "thing.done" || d.ResolvedAt != nil || d.Body != nil {
			t.Fatalf("dead letter = %+v", d)
		}
		if !strings.Contains(d.LastError, "amount is negative") {
			t.Fatalf("last error %q", d.LastError)
		}
		full, err := store.DeadLetterGet(context.Background(), db.Pool, d.ID)
		if err != nil || string(full.Body) != `{"x":1}` {
			t.Fatalf("get dead letter: %q, %v", full.Body, err)
		}
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 0 {
			t.Fatalf("inbox rows = %d, want 0 (nothing applied)", n)
		}
		if pending, redelivered := numAckPending(t, ns, "strict"); pending != 0 || redelivered != 0 {
			t.Fatalf("ack pending %d, redelivered %d; the message should be terminated", pending, redelivered)
		}
	})
}

func TestMaxDeliverDeadLettersAfterLastDelivery(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		startConsumer(t, db, ns, bs, ordersOptions("orders", 3))

		start := time.Now()
		ns.PublishHook(t, "demo", "pay-1", orders.Paid, orders.WebhookBody(orders.Paid, "o1", 100))
		hookbridgetest.Eventually(t, time.Minute, "dead letter", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters") == 1
		})
		// Two naks of 50 ms each come before the third delivery fails.
		if elapsed := time.Since(start); elapsed < 100*time.Millisecond {
			t.Fatalf("dead-lettered after %s, before the backoff schedule allowed", elapsed)
		}
		awaitSettled(t, ns, "orders") // terminated after the dead letter is recorded
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE deliveries = 3 AND reason = 'max_deliver' AND last_error LIKE '%unknown order%'"); n != 1 {
			t.Fatalf("dead letters with 3 deliveries = %d, want 1", n)
		}
		if n := db.Count(t, "SELECT count(*) FROM demo.orders"); n != 0 {
			t.Fatalf("orders = %d, want 0", n)
		}
		if pending, _ := numAckPending(t, ns, "orders"); pending != 0 {
			t.Fatalf("ack pending %d, want 0: the message should be terminated", pending)
		}
	})
}

func TestUnusableMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t)
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error { return nil })
		startConsumer(t, db, ns, bs, engine.Options{Name: "c1", EventTypes: []string{"thing.done"}, Handler: h})

		// No event id header and no Nats-Msg-Id: the message has no identity.
		msg := nats.NewMsg(stream.HookSubject("demo", "thing.done"))
		msg.Data = []byte(`{}`)
		if _, err := ns.JS.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		hookbridgetest.Eventually(t, time.Minute, "dead letter", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE reason = 'unusable' AND source = 'demo' AND event_id = ''") == 1
		})
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 0 {
			t.Fatalf("inbox rows = %d, want 0", n)
		}
	})
}

func TestRecordDeadLetterIsIdempotent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	d := engine.DeadLetter{Consumer: "c", Source: "s", EventID: "e", EventType: "t", StreamSeq: 7, Deliveries: 3,
		Reason: engine.ReasonMaxDeliver, LastError: "dial postgres://user:hunter2@db:5432/x failed\nsecond line", Body: []byte("b")}
	for range 3 {
		if err := engine.RecordDeadLetter(ctx, db.Pool, d); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters"); n != 1 {
		t.Fatalf("rows = %d, want 1", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE last_error LIKE '%hunter2%' OR last_error LIKE '%'||chr(10)||'%'"); n != 0 {
		t.Fatalf("stored error keeps a password or a newline")
	}
}
