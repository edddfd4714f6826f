package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/hookbridge/hookbridge/internal/stream"
)

// One member, a backlog of many distinct keys (order ids: a few events
// each) with some keys that have many versions among them. Nothing fails,
// nobody joins or leaves: every key must still apply in order.
func TestKeyedBacklogOfManyKeysKeepsOrder(t *testing.T) {
	t.Parallel()
	const n = 8000
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	want := map[string]int{}
	for i := range n {
		key := fmt.Sprintf("k%05d", i%(n/4)) // n/4 keys, 4 versions each, version-major
		want[key]++
		body, _ := json.Marshal(versionBody{Key: key, V: want[key]})
		ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-v%d", key, want[key]), "version.set", key, body)
	}
	var dropped, redelivered atomic.Int64
	nc, err := nats.Connect(ns.URL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if err == nats.ErrSlowConsumer {
			dropped.Add(1)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	c, err := engine.New(db.Pool, js, engine.Options{
		Name: "versions", EventTypes: []string{"version.set"}, Handler: redeliveryCounter{versionHandler{member: "a", attempts: &sync.Map{}, dead: new(atomic.Bool)}, &redelivered},
		Partitions: stream.DefaultPartitions, BatchSize: 16, AckWait: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	start := time.Now()
	hookbridgetest.Eventually(t, 5*time.Minute, "every version applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == n
	})
	t.Logf("%d events applied in %v; slow-consumer drops reported: %d; applies of a redelivered message: %d", n, time.Since(start).Round(time.Millisecond), dropped.Load(), redelivered.Load())
	checkOrder(t, db, want, nil)
}

type redeliveryCounter struct {
	versionHandler
	n *atomic.Int64
}

func (h redeliveryCounter) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	if ev.NumDelivered > 1 {
		h.n.Add(1)
	}
	return h.versionHandler.Handle(ctx, tx, ev)
}
