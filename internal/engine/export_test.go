package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
)

// ApplyBatchSavepoints applies evs as batches were applied before the
// set-wise path: transactions of at most 64 events (the old cap), a
// savepoint per event. Benchmarks compare the two paths in one run.
func ApplyBatchSavepoints(ctx context.Context, pool *pgxpool.Pool, consumerName string, h consumer.Handler, evs []consumer.Event) []consumer.Result {
	results := make([]consumer.Result, len(evs))
	if len(evs) == 1 {
		out, err := Apply(ctx, pool, consumerName, h, evs[0])
		results[0] = consumer.Result{Outcome: out, Err: err}
		return results
	}
	for lo := 0; lo < len(evs); lo += maxSavepointBatch {
		hi := min(lo+maxSavepointBatch, len(evs))
		if err := applyBatchPipelined(ctx, pool, consumerName, h, evs[lo:hi], results[lo:hi]); err != nil {
			failAll(evs[lo:hi], results[lo:hi], err)
		}
	}
	return results
}

// Decision is what [Consumer.Process] decided for one message: nak with
// Delay, or not.
type Decision struct {
	Nak   bool
	Delay time.Duration
}

// Process applies msgs as the runner does and returns what it would do
// with each, without acking or nak'ing them.
func (c *Consumer) Process(ctx context.Context, msgs []jetstream.Msg) []Decision {
	actions := c.process(ctx, msgs)
	out := make([]Decision, len(actions))
	for i, a := range actions {
		out[i] = Decision{Nak: a.kind == nak, Delay: a.delay}
	}
	return out
}

// IntakeClosed reports whether the consumer paused its intake (the
// database failed).
func (c *Consumer) IntakeClosed() bool { return c.gate.closed.Load() }

// SetMaxForeignScan lowers what a takeover of o's consumer reads before
// the whole partition waits instead.
func SetMaxForeignScan(o *Options, n int) { o.maxForeignScan = n }

// SetKeyedRecheck sets how often a consumer with no keyed source looks
// for keyed messages of its sources.
func SetKeyedRecheck(o *Options, d time.Duration) { o.keyedRecheck = d }
