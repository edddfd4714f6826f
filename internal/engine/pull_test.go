package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// TestBusyWorkersDropNoMessages: while every worker is busy for longer
// than the pull's heartbeat timeout (2 × 2.5 s) and the buffer is full,
// the NATS client must not drop messages ("slow consumer"). A dropped
// message is redelivered only after ack_wait, late and out of order; here
// every event must be applied on its first delivery.
func TestBusyWorkersDropNoMessages(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)

	var slow atomic.Int64
	start := time.Now()
	nc, err := nats.Connect(ns.URL(), nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slow.Add(1)
			d, _ := sub.Dropped()
			n, _ := sub.Delivered()
			t.Logf("slow consumer on %s at %s dropped %d delivered %d", sub.Subject, time.Since(start), d, n)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	const backlog, trickle = 300, 60
	ns.PublishHook(t, "demo", "first", "thing.done", []byte(`{}`))
	var (
		mu        sync.Mutex
		redeliver []string
		calls     atomic.Int32
	)
	release := make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if calls.Add(1) == 1 {
			<-release // the one worker is busy past the heartbeat timeout
		}
		if ev.NumDelivered != 1 {
			mu.Lock()
			redeliver = append(redeliver, fmt.Sprintf("%s(%d)", ev.ID, ev.NumDelivered))
			mu.Unlock()
		}
		return nil
	})
	startConsumer(t, db, &hookbridgetest.JetStream{Server: ns.Server, Conn: nc, JS: js}, 4, engine.Options{
		Name: "busy", EventTypes: []string{"thing.done"}, Handler: h,
		Concurrency: 1, AckWait: 30 * time.Second,
	})
	hookbridgetest.Eventually(t, time.Minute, "the worker busy", func() bool { return calls.Load() >= 1 })
	// A backlog arrives while the worker is busy, more than the pull
	// window, then events keep trickling in, as under load.
	for i := range backlog {
		ns.PublishHook(t, "demo", fmt.Sprintf("a%d", i), "thing.done", []byte(`{}`))
	}
	for i := range trickle {
		ns.PublishHook(t, "demo", fmt.Sprintf("b%d", i), "thing.done", []byte(`{}`))
		time.Sleep(7 * time.Second / trickle)
	}
	close(release)
	hookbridgetest.Eventually(t, time.Minute, "every event applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == 1+backlog+trickle
	})
	mu.Lock()
	defer mu.Unlock()
	if n := slow.Load(); n != 0 || len(redeliver) != 0 {
		t.Fatalf("%d slow-consumer errors; %d events applied on a redelivery: %v", n, len(redeliver), redeliver)
	}
}
