package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/store"
)

// recordBatch bounds the attempts written in one transaction.
const recordBatch = 512

// recorder writes attempt rows in batches, one transaction each. A row
// per attempt with a commit each made the commit's WAL flush the limit:
// about 1,000 deliveries/s with 16 in flight on the 2-core test machine
// (BenchmarkThroughput), an eighth of a bare HTTP loop. The history is
// written just after the delivery's ack; the rows still queued when a
// process dies are lost with it, never the delivery.
type recorder struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	ch   chan store.DeliveryAttempt
}

func newRecorder(pool *pgxpool.Pool, log *slog.Logger) *recorder {
	// Room for a few batches; a full queue makes senders wait for the
	// database rather than grow without bound.
	return &recorder{pool: pool, log: log, ch: make(chan store.DeliveryAttempt, 4*recordBatch)}
}

// add queues a; a full queue makes the caller wait for the database
// rather than grow without bound (the recorder outlives the senders, so
// a stopping sender's last rows are written).
func (r *recorder) add(a store.DeliveryAttempt) {
	r.ch <- a
}

// run writes what is queued until ctx ends, then what is left.
func (r *recorder) run(ctx context.Context) {
	for {
		var first store.DeliveryAttempt
		select {
		case first = <-r.ch:
		case <-ctx.Done():
			r.drain()
			return
		}
		r.write(ctx, r.take(first))
	}
}

// take returns first and whatever else is queued, up to recordBatch.
func (r *recorder) take(first store.DeliveryAttempt) []store.DeliveryAttempt {
	rows := []store.DeliveryAttempt{first}
	for len(rows) < recordBatch {
		select {
		case a := <-r.ch:
			rows = append(rows, a)
		default:
			return rows
		}
	}
	return rows
}

func (r *recorder) drain() {
	for {
		select {
		case a := <-r.ch:
			r.write(context.Background(), r.take(a))
		default:
			return
		}
	}
}

func (r *recorder) write(ctx context.Context, rows []store.DeliveryAttempt) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := store.DeliveryAttemptsInsert(wctx, r.pool, rows); err != nil {
		// The history is worth less than the deliveries: logged, not retried.
		r.log.Warn("delivery: record attempts", "rows", len(rows), "err", err)
	}
}
