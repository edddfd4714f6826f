package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/store"
)

// eventSavepoint is the savepoint each event of a batch runs in. Handlers
// that open savepoints of their own get pgx's sp_N names, never this one.
const eventSavepoint = "hookbridge_event"

// applyBatchPipelined applies evs in one transaction with a savepoint per
// event: the statements of the per-event path, in the same order, with
// the previous event's RELEASE SAVEPOINT, this event's SAVEPOINT and its
// inbox claim sent in one round trip (a pgx pipeline). It is the fallback
// for a small batch whose set-wise apply failed at an unknown place: a
// failing claim or handler rolls back to its event's savepoint only, so
// one pass gives every event its own outcome, however many fail. It fills
// results and returns nil, or returns the error that lost the whole
// transaction (a failing SAVEPOINT, RELEASE or rollback, or the commit,
// which releases the last savepoint); results are then meaningless.
// len(evs) must be at most maxSavepointBatch.
func applyBatchPipelined(ctx context.Context, pool *pgxpool.Pool, consumerName string, h consumer.Handler, evs []consumer.Event, results []consumer.Result) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("apply batch: %w: %w", errBeginFailed, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	wrote := false
	open := false // a savepoint of an earlier event is still open
	for i, ev := range evs {
		claimed, cleared, err, fatal := claimInSavepoint(ctx, tx, consumerName, ev, open)
		if fatal != nil {
			return fatal
		}
		open = true
		var out consumer.Outcome
		switch {
		case err != nil:
		case !claimed:
			out, err = resolveRepeat(ctx, tx, consumerName, ev)
		default:
			if err = runHandler(ctx, h, tx, ev); err == nil {
				out = consumer.Processed
			}
		}
		if err != nil {
			if _, rbErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+eventSavepoint); rbErr != nil {
				// The transaction is unusable: nothing of the batch commits.
				return fmt.Errorf("apply batch: rollback to savepoint after %w: %w", err, rbErr)
			}
			results[i] = consumer.Result{Outcome: consumer.Failed, Err: err}
			continue
		}
		wrote = wrote || out != consumer.Duplicate || cleared
		results[i] = consumer.Result{Outcome: out}
	}
	if !wrote {
		return nil
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("apply batch: commit: %w", err)
	}
	return nil
}

// claimInSavepoint releases the previous event's savepoint (when open),
// opens this event's and claims ev in the inbox (and deletes a
// redelivered message's failure counter, reporting it in cleared), in one
// round trip. err is the claim's own failure (the event fails, the batch
// goes on); fatal means the savepoint could not be released or set and
// the transaction is lost.
func claimInSavepoint(ctx context.Context, tx pgx.Tx, consumerName string, ev consumer.Event, open bool) (claimed, cleared bool, err, fatal error) {
	b := &pgx.Batch{}
	if open {
		b.Queue("RELEASE SAVEPOINT " + eventSavepoint)
	}
	b.Queue("SAVEPOINT " + eventSavepoint)
	store.QueueInboxClaim(b, consumerName, inboxEntry(&ev)) // the statement applyInTx runs
	clear := queueClearFailures(b, consumerName, []consumer.Event{ev})
	br := tx.SendBatch(ctx, b)
	if open {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return false, false, nil, fmt.Errorf("apply batch: release savepoint: %w", err)
		}
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return false, false, nil, fmt.Errorf("apply batch: savepoint: %w", err)
	}
	claimed, claimErr := store.ReadInboxClaim(br)
	if clear && claimErr == nil {
		cleared, claimErr = execCleared(br)
	}
	if err := br.Close(); err != nil && claimErr == nil {
		claimErr = err
	}
	if claimErr != nil {
		return false, false, fmt.Errorf("apply %s/%s: claim inbox: %w", ev.Source, ev.ID, claimErr), nil
	}
	return claimed, cleared, nil, nil
}
