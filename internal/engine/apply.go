package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/store"
)

// MessageOutcomes are the outcomes a running consumer reports for its
// messages (the outcome label of its metrics).
func MessageOutcomes() []consumer.Outcome {
	return []consumer.Outcome{consumer.Processed, consumer.Duplicate, consumer.Conflict, consumer.Postponed, consumer.Failed, consumer.DeadLettered}
}

// Apply applies ev for the consumer named consumerName in one transaction of
// its own: inbox claim, handler, commit. It is the whole exactly-once
// mechanism; the runner only decides when to ack.
func Apply(ctx context.Context, pool *pgxpool.Pool, consumerName string, h consumer.Handler, ev consumer.Event) (consumer.Outcome, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return consumer.Failed, fmt.Errorf("apply %s/%s: %w: %w", ev.Source, ev.ID, errBeginFailed, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	out, cleared, err := applyInTx(ctx, tx, consumerName, h, ev)
	if err != nil {
		return consumer.Failed, err
	}
	if out == consumer.Duplicate && !cleared {
		return out, nil // nothing was written; the deferred rollback ends the tx
	}
	if err := tx.Commit(ctx); err != nil {
		return consumer.Failed, fmt.Errorf("apply %s/%s: commit: %w", ev.Source, ev.ID, err)
	}
	return out, nil
}

// applyInTx claims the event in the inbox and runs the handler, all inside
// tx. tx may be a whole transaction or a savepoint of a larger batch: the
// code is the same, which is what lets batches share one commit.
//
// The claim is an INSERT … ON CONFLICT DO NOTHING, never a prior SELECT
// (store.InboxClaim): when two deliveries race, the second INSERT waits on
// the first's row lock and, once that commits, inserts nothing; it then
// reads the winner's row. If the first rolls back, the second claims the
// key itself.
//
// A redelivered message may have a failure counter (failures.go); it is
// deleted in the same round trip as the claim, so it goes exactly when the
// apply commits. cleared reports that a counter was deleted: the
// transaction then has to commit even for a duplicate.
func applyInTx(ctx context.Context, tx pgx.Tx, consumerName string, h consumer.Handler, ev consumer.Event) (out consumer.Outcome, cleared bool, err error) {
	claimed, cleared, err := claimOne(ctx, tx, consumerName, ev)
	if err != nil {
		return consumer.Failed, false, err
	}
	if !claimed {
		out, err := resolveRepeat(ctx, tx, consumerName, ev)
		return out, cleared, err
	}
	if err := runHandler(ctx, h, tx, ev); err != nil {
		return consumer.Failed, false, err
	}
	return consumer.Processed, cleared, nil
}

// claimOne runs the inbox claim of ev and, for a redelivered message, the
// deletion of its failure counter, and for a keyed one the mark of the
// dead letters it passes, in one round trip. cleared reports that either
// wrote a row: the transaction must then commit even for a duplicate.
func claimOne(ctx context.Context, tx pgx.Tx, consumerName string, ev consumer.Event) (claimed, cleared bool, err error) {
	if ev.NumDelivered <= 1 && ev.OrderingKey == "" {
		claimed, err := store.InboxClaim(ctx, tx, consumerName, inboxEntry(&ev))
		if err != nil {
			return false, false, fmt.Errorf("apply %s/%s: claim inbox: %w", ev.Source, ev.ID, err)
		}
		return claimed, false, nil
	}
	b := &pgx.Batch{}
	store.QueueInboxClaim(b, consumerName, inboxEntry(&ev))
	clear := queueClearFailures(b, consumerName, []consumer.Event{ev})
	mark := queuePassedMarks(b, consumerName, []consumer.Event{ev})
	br := tx.SendBatch(ctx, b)
	claimed, err = store.ReadInboxClaim(br)
	if err != nil {
		_ = br.Close()
		return false, false, fmt.Errorf("apply %s/%s: claim inbox: %w", ev.Source, ev.ID, err)
	}
	cleared, err = readAfterClaim(br, clear, mark)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, false, fmt.Errorf("apply %s/%s: %w", ev.Source, ev.ID, err)
	}
	return claimed, cleared, nil
}

// readAfterClaim reads what was queued after a claim: the failure
// counters' deletion (clear) and the passed marks (mark), and reports
// whether either wrote a row.
func readAfterClaim(br pgx.BatchResults, clear, mark bool) (wrote bool, err error) {
	if clear {
		if wrote, err = execCleared(br); err != nil {
			return false, fmt.Errorf("clear failure counts: %w", err)
		}
	}
	if mark {
		marked, err := store.ReadDeadLetterMarkPassedBy(br)
		if err != nil {
			return false, fmt.Errorf("mark passed dead letters: %w", err)
		}
		postponed, err := store.ReadFailureMarkPassedBy(br)
		if err != nil {
			return false, fmt.Errorf("mark passed postponed events: %w", err)
		}
		wrote = wrote || marked || postponed
	}
	return wrote, nil
}

// queuePassedMarks adds to b the mark of the dead letters that evs' keyed
// events pass (docs/DESIGN.md, "Order"), and of the postponed events they
// pass (whose dead letters, if they become ones, take the mark over), in
// their own transaction, and reports whether it queued anything (no keyed
// event: nothing). Per key it
// sends the event of the transaction with the highest stream sequence: it
// passes every dead letter any of them passes, and they commit together.
// The first of the key in the transaction would not do: a batch tried from
// the key's head (a postponed event retried) may hold an event from before
// a dead letter and one from after it.
func queuePassedMarks(b *pgx.Batch, consumerName string, evs []consumer.Event) bool {
	var last []store.PassingEvent
	at := map[string]int{}
	for _, ev := range evs {
		if ev.OrderingKey == "" {
			continue
		}
		pe := store.PassingEvent{Source: ev.Source, OrderingKey: ev.OrderingKey, EventID: ev.ID, StreamSeq: ev.StreamSeq}
		k := orderKey(ev.Source, ev.OrderingKey)
		if i, ok := at[k]; !ok {
			at[k] = len(last)
			last = append(last, pe)
		} else if ev.StreamSeq > last[i].StreamSeq {
			last[i] = pe
		}
	}
	if len(last) == 0 {
		return false
	}
	store.QueueDeadLetterMarkPassedBy(b, consumerName, last)
	store.QueueFailureMarkPassedBy(b, consumerName, last)
	return true
}

// messageKey names ev's message in the dead letters and failure counters.
func messageKey(ev *consumer.Event) store.MessageKey {
	return store.MessageKey{Source: ev.Source, EventID: ev.ID, StreamSeq: ev.StreamSeq}
}

// inboxEntry is what ev's inbox claim writes.
func inboxEntry(ev *consumer.Event) store.InboxEntry {
	return store.InboxEntry{Source: ev.Source, EventID: ev.ID, EventType: ev.Type, BodySHA256: ev.BodySHA256[:], StreamSeq: ev.StreamSeq}
}

// execCleared reads the result of a queued counter deletion.
func execCleared(br pgx.BatchResults) (bool, error) {
	tag, err := br.Exec()
	return tag.RowsAffected() > 0, err
}

// runHandler calls the handler and turns a panic into an error, so a bug
// in one handler fails its event (rolled back, retried, dead-lettered at
// max_deliver) instead of stalling the message or the process.
func runHandler(ctx context.Context, h consumer.Handler, tx pgx.Tx, ev consumer.Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("apply %s/%s: handler panicked: %v\n%s", ev.Source, ev.ID, p, debug.Stack())
		}
	}()
	if err := h.Handle(ctx, tx, ev); err != nil {
		return fmt.Errorf("apply %s/%s: handler: %w", ev.Source, ev.ID, err)
	}
	return nil
}

// resolveRepeat decides between duplicate and conflict for an event whose
// inbox key is taken, and records a conflict.
func resolveRepeat(ctx context.Context, tx pgx.Tx, consumerName string, ev consumer.Event) (consumer.Outcome, error) {
	stored, storedSeq, err := store.InboxGet(ctx, tx, consumerName, ev.Source, ev.ID)
	if err != nil {
		return consumer.Failed, fmt.Errorf("apply %s/%s: read inbox: %w", ev.Source, ev.ID, err)
	}
	if string(stored) == string(ev.BodySHA256[:]) {
		return consumer.Duplicate, nil
	}
	err = RecordConflict(ctx, tx, ConflictRecord{
		DetectedBy:     consumerName,
		Source:         ev.Source,
		EventID:        ev.ID,
		EventType:      ev.Type,
		OriginalSHA256: stored,
		OriginalSeq:    storedSeq,
		RejectedSeq:    int64(ev.StreamSeq),
		RejectedBody:   ev.Body,
	})
	if err != nil {
		return consumer.Failed, err
	}
	return consumer.Conflict, nil
}

// ConflictRecord is one row of the conflicts (the store's row type). To
// record one, DetectedBy, Source, EventID, EventType and RejectedBody are
// needed, and OriginalSHA256, OriginalSeq and RejectedSeq when known; the
// rejected body's hash is computed.
type ConflictRecord = store.Conflict

// RecordConflict inserts c; recording the same conflict twice (same
// detector, event and rejected body) keeps one row. An empty rejected body
// is stored empty, not NULL.
func RecordConflict(ctx context.Context, tx pgx.Tx, c ConflictRecord) error {
	if err := store.ConflictInsert(ctx, tx, c); err != nil {
		return fmt.Errorf("record conflict %s/%s: %w", c.Source, c.EventID, err)
	}
	return nil
}

// errUnusable marks a message that can never be applied (missing identity).
var errUnusable = errors.New("unusable message")
