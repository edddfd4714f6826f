package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// roundTrips counts the statements and pipelines a pool's connections
// send: each is one round trip to the server (BEGIN and COMMIT included;
// a pgx Batch is one). Statement preparation on first use is not counted:
// it happens once per connection and statement.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// tracedPool is a pool on db whose round trips are counted.
func tracedPool(b *testing.B, db *hookbridgetest.Database, conns int32) (*pgxpool.Pool, *roundTrips) {
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		b.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool, rt
}

type applyFunc func(ctx context.Context, pool *pgxpool.Pool, consumer string, h consumer.Handler, evs []consumer.Event) []consumer.Result

// BenchmarkApplyBatch applies batches of first deliveries of the accounts
// test domain (an insert and an outbox row per event) with the batch path
// as it was (savepoints: transactions of at most 64 events, a savepoint
// per event) and the set-wise path, with a per-event handler and a
// set-wise one. One op is one batch; compare events/s and round trips per
// batch across paths and sizes of one run. workers=4 runs four batches at
// once, as the consumer's concurrency does.
func BenchmarkApplyBatch(b *testing.B) {
	paths := []struct {
		name  string
		apply applyFunc
		h     func() consumer.Handler
	}{
		{"savepoints/handler=per-event", engine.ApplyBatchSavepoints, func() consumer.Handler { return accountsHandler() }},
		{"setwise/handler=per-event", engine.ApplyBatch, func() consumer.Handler { return accountsHandler() }},
		{"setwise/handler=batch", engine.ApplyBatch, func() consumer.Handler { return accountsBatchHandler() }},
	}
	for _, workers := range []int{1, 4} {
		for _, size := range []int{1, 64, 256, 1024} {
			for _, p := range paths {
				if size == 1 && p.name != paths[0].name {
					continue // one event is Apply on every path
				}
				b.Run(fmt.Sprintf("workers=%d/size=%d/%s", workers, size, p.name), func(b *testing.B) {
					benchApply(b, workers, size, p.apply, p.h())
				})
			}
		}
	}
}

func benchApply(b *testing.B, workers, size int, apply applyFunc, h consumer.Handler) {
	db := hookbridgetest.Postgres(b, accountsMigrations())
	pool, rt := tracedPool(b, db, int32(workers))
	ctx := context.Background()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	rt.n.Store(0)
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			evs := make([]consumer.Event, size)
			for {
				op := next.Add(1) - 1
				if op >= int64(b.N) {
					return
				}
				for i := range evs {
					n := int(op)*size + i
					evs[i] = accountEvent(fmt.Sprintf("e-%d", n), accountOpened,
						accountBody{Account: fmt.Sprintf("a-%d", n), Amount: 100}, uint64(n+1))
				}
				for _, r := range apply(ctx, pool, "accounts", h, evs) {
					if r.Outcome != consumer.Processed {
						failed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d events not processed", n)
	}
	events := b.N * size
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(events), "µs/event")
	b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/batch")
	for _, table := range []string{"hookbridge.inbox", "accounts.accounts", "hookbridge.outbox"} {
		if got := db.Count(b, "SELECT count(*) FROM "+table); got != events {
			b.Fatalf("%s rows = %d, want %d", table, got, events)
		}
	}
}
