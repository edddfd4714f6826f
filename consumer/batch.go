package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxBatch caps the events applied in one transaction. Each event runs in
// its own savepoint, and Postgres keeps at most 64 subtransactions per
// backend in its cache; beyond that every snapshot has to consult
// pg_subtrans on disk and throughput collapses. So a batch never exceeds 64.
const MaxBatch = 64

// Result is the outcome of one event of a batch.
type Result struct {
	Outcome Outcome
	Err     error // set when Outcome is Failed
}

// ErrBatchAborted marks the results of a batch whose shared transaction
// was lost (a statement timed out and broke the connection, a handler
// swallowed an error and left the transaction aborted, the commit failed):
// nothing of it was applied, and which event caused it is unknown. The
// consumer then applies the events one by one, so only the culprit fails.
var ErrBatchAborted = errors.New("batch transaction aborted")

// ApplyBatch applies evs in one transaction, each inside its own savepoint,
// and commits once. An event that fails rolls back to its savepoint only;
// the others still commit. If the commit itself fails, every event is
// Failed and nothing was applied. len(evs) must be at most [MaxBatch].
//
// The inbox claim and the handler run exactly as in [Apply], so handlers
// cannot tell whether they run alone or in a batch.
func ApplyBatch(ctx context.Context, pool *pgxpool.Pool, consumer string, h Handler, evs []Event) []Result {
	results := make([]Result, len(evs))
	failAll := func(err error) []Result {
		for i := range results {
			results[i] = Result{Outcome: Failed, Err: fmt.Errorf("%w: %w", ErrBatchAborted, err)}
		}
		return results
	}
	if len(evs) > MaxBatch {
		return failAll(fmt.Errorf("apply batch: %d events exceed the maximum of %d", len(evs), MaxBatch))
	}
	if len(evs) == 1 {
		out, err := Apply(ctx, pool, consumer, h, evs[0])
		results[0] = Result{Outcome: out, Err: err}
		return results
	}
	return applyBatchPipelined(ctx, pool, consumer, h, evs, results, failAll)
}
