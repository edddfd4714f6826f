package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// How many unacked messages one instance of a keyed consumer takes under
// a backlog, against Options.Held (the bound the unkeyed runner keeps),
// and how long a graceful stop then takes.
func TestKeyedInstanceHoldsABoundedWindow(t *testing.T) {
	t.Parallel()
	const n = 6000
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	for i := range n {
		ns.PublishKeyedHook(t, "demo", fmt.Sprintf("e%05d", i), "thing.done", fmt.Sprintf("key-%05d", i), []byte(`{}`))
	}
	slow := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	opts := engine.Options{Name: "things", EventTypes: []string{"thing.done"}, Handler: slow,
		Partitions: stream.DefaultPartitions, BatchSize: 16, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c, err := engine.New(db.Pool, ns.JS, opts)
	if err != nil {
		t.Fatal(err)
	}
	o := opts
	o.Prefetch = 2 * 4 * 16
	t.Logf("Options.Held (one unkeyed instance's bound) = %d", o.Held())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	held := func() int {
		sum := 0
		for p := range stream.DefaultPartitions {
			d, err := ns.JS.Consumer(context.Background(), stream.Hooks, stream.PartitionDurable("things", p))
			if err != nil {
				continue
			}
			info, err := d.Info(context.Background())
			if err == nil {
				sum += info.NumAckPending
			}
		}
		return sum
	}
	peak := 0
	for range 20 {
		time.Sleep(250 * time.Millisecond)
		peak = max(peak, held())
	}
	applied := db.Count(t, `SELECT count(*) FROM hookbridge.inbox`)
	t.Logf("after 5 s: %d unacked messages held by the one instance (peak), %d applied", peak, applied)
	start := time.Now()
	cancel()
	<-done
	after := db.Count(t, `SELECT count(*) FROM hookbridge.inbox`)
	t.Logf("graceful stop took %v and applied %d more events", time.Since(start).Round(time.Millisecond), after-applied)
	if peak > 2*o.Held() {
		t.Errorf("a keyed instance held %d unacked messages, Options.Held is %d", peak, o.Held())
	}
}
