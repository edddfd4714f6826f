package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A member that dies holding messages must not stall the others: what it
// held comes back only after ack_wait (2 minutes here), and until then it
// counts against the durable's max_ack_pending for everyone. Member a
// takes what it can of a backlog and hangs in its handler, then loses its
// connection; member b, started after, must apply everything a did not
// hold long before a's messages come back. With the consumer's queue
// unbounded, a held the whole max_ack_pending and b got nothing until
// ack_wait (the stall seen with batch_size 32).
func TestDeadMemberDoesNotStallTheOthers(t *testing.T) {
	t.Parallel()
	const n, batch = 3000, 32
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	for i := range n {
		ns.PublishHook(t, "demo", fmt.Sprintf("e%04d", i), "thing.done", []byte(`{}`))
	}
	hang := make(chan struct{})
	hanging := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		<-hang
		return nil
	})
	applying := consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return nil })
	run := func(h consumer.Handler) *nats.Conn {
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		// A pool of its own: a's hanging batches hold their connections.
		pool, err := pgxpool.New(context.Background(), db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		c, err := engine.New(pool, js, engine.Options{Name: "things", EventTypes: []string{"thing.done"}, Handler: h,
			BatchSize: batch, AckWait: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = c.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done; nc.Close() })
		return nc
	}
	a := run(hanging)
	var durable jetstream.Consumer
	hookbridgetest.Eventually(t, time.Minute, "the durable made", func() bool {
		var err error
		durable, err = ns.JS.Consumer(context.Background(), stream.Hooks, "things")
		return err == nil
	})
	// a takes as much as it will: its holdings stop growing.
	var held int
	hookbridgetest.Eventually(t, time.Minute, "member a holding a stable share", func() bool {
		info, err := durable.Info(context.Background())
		if err != nil || info.NumAckPending == 0 || info.NumAckPending != held {
			if err == nil {
				held = info.NumAckPending
			}
			time.Sleep(300 * time.Millisecond)
			return false
		}
		return true
	})
	a.Close() // dies: no more in-progress acks; its messages return after ack_wait
	run(applying)
	t.Cleanup(func() { close(hang) }) // first: a's pool closes only once its batches end
	hookbridgetest.Eventually(t, time.Minute, "member b applying everything a did not hold", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") >= n-held
	})
	t.Logf("member a held %d of %d messages when it died; b applied the rest", held, n)
}
