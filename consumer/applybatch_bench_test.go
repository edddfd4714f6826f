package consumer_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/internal/testenv"
)

// benchOrderEvent is a distinct order.created event: every one claims a
// new inbox key, inserts an order and enqueues an outbox row, the full
// work of a first delivery.
func benchOrderEvent(run string, n int) consumer.Event {
	id := fmt.Sprintf("%s-%d", run, n)
	body := testenv.OrderBody(orders.Created, id, int64(100+n))
	return consumer.Event{Source: "demo", ID: id, Type: orders.Created, Body: body,
		BodySHA256: sha256.Sum256(body), StreamSeq: uint64(n + 1), NumDelivered: 1}
}

// BenchmarkApplyBatch applies batches of first deliveries with the orders
// handler through consumer.ApplyBatch (one transaction, one savepoint per
// event, one commit per batch, synchronous_commit as the server has it).
// One op is one batch; events/s is the figure to compare across sizes.
// "workers=4" runs four batches at once, as the consumer's default
// concurrency does.
func BenchmarkApplyBatch(b *testing.B) {
	for _, workers := range []int{1, 4} {
		for _, size := range []int{1, 8, 32, 64} {
			b.Run(fmt.Sprintf("workers=%d/size=%d", workers, size), func(b *testing.B) {
				benchApplyBatch(b, workers, size, orders.Handler("orders"), true)
			})
		}
	}
}

// BenchmarkApplyBatchClaimOnly is BenchmarkApplyBatch with a handler that
// writes nothing: what is left is hookbridge's own cost per event (inbox
// claim, savepoint, commit), the part a faster apply path can change.
func BenchmarkApplyBatchClaimOnly(b *testing.B) {
	noop := consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return nil })
	for _, size := range []int{1, 8, 32, 64} {
		b.Run(fmt.Sprintf("workers=1/size=%d", size), func(b *testing.B) {
			benchApplyBatch(b, 1, size, noop, false)
		})
	}
}

func benchApplyBatch(b *testing.B, workers, size int, h consumer.Handler, countOrders bool) {
	db := testenv.Postgres(b, orders.Migrations())
	ctx := context.Background()
	run := fmt.Sprintf("w%d-s%d", workers, size)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
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
					evs[i] = benchOrderEvent(run, int(op)*size+i)
				}
				for _, r := range consumer.ApplyBatch(ctx, db.Pool, "orders", h, evs) {
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
	if got := db.Count(b, "SELECT count(*) FROM hookbridge.inbox"); got != events {
		b.Fatalf("inbox rows = %d, want %d", got, events)
	}
	if got := db.Count(b, "SELECT count(*) FROM demo.orders"); countOrders && got != events {
		b.Fatalf("orders = %d, want %d", got, events)
	}
}
