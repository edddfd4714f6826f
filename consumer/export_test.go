package consumer

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ApplyBatchSavepoints applies evs as batches were applied before the
// set-wise path: transactions of at most 64 events (the old cap), a
// savepoint per event. Benchmarks compare the two paths in one run.
func ApplyBatchSavepoints(ctx context.Context, pool *pgxpool.Pool, consumer string, h Handler, evs []Event) []Result {
	results := make([]Result, len(evs))
	if len(evs) == 1 {
		out, err := Apply(ctx, pool, consumer, h, evs[0])
		results[0] = Result{Outcome: out, Err: err}
		return results
	}
	for lo := 0; lo < len(evs); lo += maxSavepointBatch {
		hi := min(lo+maxSavepointBatch, len(evs))
		if err := applyBatchPipelined(ctx, pool, consumer, h, evs[lo:hi], results[lo:hi]); err != nil {
			failAll(evs[lo:hi], results[lo:hi], err)
		}
	}
	return results
}
