package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/failat"
	"github.com/hookbridge/hookbridge/internal/store"
)

// The set-wise apply of a batch: one transaction, and a number of round
// trips that does not grow with the batch:
//
//	BEGIN
//	claim every event in the inbox (one INSERT … SELECT FROM unnest …
//	  ON CONFLICT DO NOTHING RETURNING), pipelined with the deletion of the
//	  failure counters of redelivered messages
//	read the stored hashes of the repeats (only when there are any)
//	record the conflicts (one INSERT, only when there are any)
//	the handler over the new events (BatchHandler.HandleBatch, or Handle
//	  per event for a plain Handler, in the same transaction)
//	COMMIT (skipped when everything was a duplicate)
//
// It opens no savepoint: any failure loses the whole attempt, and the
// caller (batch.go) narrows down to the culprit. Outcomes are those the
// per-event path gives event by event: the same inbox claim decides, and
// an event id seen twice in one batch is classified against the inbox row
// the per-event path would find at that point, the earlier occurrence's
// when that one was new.

// setFailure is a failed set-wise attempt. When it locates the culprit,
// evs[lo:hi] holds it and every event before lo went through without
// error; otherwise lo == hi == 0.
type setFailure struct {
	err    error
	lo, hi int
}

// located reports whether f narrows a batch of n events down at all.
func (f *setFailure) located(n int) bool {
	return f.lo >= 0 && f.hi <= n && f.lo < f.hi && (f.lo > 0 || f.hi < n)
}

func unlocated(err error) *setFailure { return &setFailure{err: err} }

type inboxKey struct{ source, id string }

// inboxRow is what the inbox holds for a key: the hash and sequence a
// repeat is compared with.
type inboxRow struct {
	sha []byte
	seq int64
}

// setwise applies evs in one transaction, filling results, or returns why
// it could not; results are then meaningless.
func (a *applier) setwise(ctx context.Context, evs []consumer.Event, results []consumer.Result) *setFailure {
	ctx, cancel := a.attempt(ctx)
	defer cancel()
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return unlocated(fmt.Errorf("apply batch: %w: %w", errBeginFailed, err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	first := make(map[inboxKey]int, len(evs)) // each key's first occurrence
	uniq := make([]int, 0, len(evs))
	for i, ev := range evs {
		k := inboxKey{ev.Source, ev.ID}
		if _, seen := first[k]; !seen {
			first[k] = i
			uniq = append(uniq, i)
		}
	}
	claimed, cleared, err := a.claimSet(ctx, tx, evs, uniq)
	if err != nil {
		return unlocated(err)
	}
	var stored map[inboxKey]inboxRow
	if len(claimed) < len(uniq) {
		if stored, err = a.readRepeats(ctx, tx, evs, uniq, claimed); err != nil {
			return unlocated(err)
		}
	}

	// Classify in stream order, as the per-event path would.
	current := make(map[inboxKey]inboxRow, len(uniq)-len(claimed))
	var news []consumer.Event
	var newIdx []int
	var conflicts []ConflictRecord
	for i, ev := range evs {
		k := inboxKey{ev.Source, ev.ID}
		if first[k] == i && claimed[k] {
			news = append(news, ev)
			newIdx = append(newIdx, i)
			current[k] = inboxRow{sha: ev.BodySHA256[:], seq: int64(ev.StreamSeq)}
			results[i] = consumer.Result{Outcome: consumer.Processed}
			continue
		}
		row, ok := current[k]
		if !ok {
			if row, ok = stored[k]; !ok {
				// Gone between claim and read (retention): the per-event
				// path fails this event the same way.
				return &setFailure{err: fmt.Errorf("apply %s/%s: read inbox: %w", ev.Source, ev.ID, pgx.ErrNoRows), lo: i, hi: i + 1}
			}
			current[k] = row
		}
		if string(row.sha) == string(ev.BodySHA256[:]) {
			results[i] = consumer.Result{Outcome: consumer.Duplicate}
			continue
		}
		conflicts = append(conflicts, ConflictRecord{DetectedBy: a.consumer, Source: ev.Source, EventID: ev.ID, EventType: ev.Type,
			OriginalSHA256: row.sha, OriginalSeq: row.seq, RejectedSeq: int64(ev.StreamSeq), RejectedBody: ev.Body})
		results[i] = consumer.Result{Outcome: consumer.Conflict}
	}
	if len(conflicts) > 0 {
		if err := recordConflicts(ctx, tx, conflicts); err != nil {
			return unlocated(err)
		}
	}
	if len(news) > 0 {
		if be := failat.Handle(ctx, tx, a.h, news, eventName); be != nil {
			f := &setFailure{err: fmt.Errorf("apply batch: handler: %w", be)}
			if be.Lo >= 0 && be.Lo < be.Hi && be.Hi <= len(news) {
				f.lo, f.hi = newIdx[be.Lo], newIdx[be.Hi-1]+1
			}
			return f
		}
	}
	if len(news) == 0 && len(conflicts) == 0 && !cleared {
		return nil // only duplicates: nothing was written, the rollback ends the tx
	}
	if err := tx.Commit(ctx); err != nil {
		return unlocated(fmt.Errorf("apply batch: commit: %w", err))
	}
	return nil
}

// claimSet claims the events at uniq (one per key) in one statement, in
// key order so that racing batches lock inbox keys in the same order, and
// deletes the failure counters of redelivered messages and marks the dead
// letters keyed events pass in the same round trip. It returns the keys it
// claimed, and whether anything besides was written (cleared).
func (a *applier) claimSet(ctx context.Context, tx pgx.Tx, evs []consumer.Event, uniq []int) (claimed map[inboxKey]bool, cleared bool, err error) {
	sorted := slices.Clone(uniq)
	slices.SortFunc(sorted, func(x, y int) int {
		return cmp.Or(cmp.Compare(evs[x].Source, evs[y].Source), cmp.Compare(evs[x].ID, evs[y].ID))
	})
	n := len(sorted)
	entries := make([]store.InboxEntry, n)
	for j, i := range sorted {
		entries[j] = inboxEntry(&evs[i])
	}
	b := &pgx.Batch{}
	store.QueueInboxClaimMany(b, a.consumer, entries)
	clear := queueClearFailures(b, a.consumer, evs)
	mark := queuePassedMarks(b, a.consumer, evs)
	br := tx.SendBatch(ctx, b)
	defer br.Close() //nolint:errcheck // the error is read below
	claimed = make(map[inboxKey]bool, n)
	err = store.ReadInboxClaimMany(br, func(source, id string) { claimed[inboxKey{source, id}] = true })
	if err != nil {
		return nil, false, fmt.Errorf("apply batch: claim inbox: %w", err)
	}
	if cleared, err = readAfterClaim(br, clear, mark); err != nil {
		return nil, false, fmt.Errorf("apply batch: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, false, fmt.Errorf("apply batch: claim inbox: %w", err)
	}
	return claimed, cleared, nil
}

// readRepeats reads the inbox rows of the keys at uniq that were not
// claimed.
func (a *applier) readRepeats(ctx context.Context, tx pgx.Tx, evs []consumer.Event, uniq []int, claimed map[inboxKey]bool) (map[inboxKey]inboxRow, error) {
	var keys []store.EventKey
	for _, i := range uniq {
		if !claimed[inboxKey{evs[i].Source, evs[i].ID}] {
			keys = append(keys, store.EventKey{Source: evs[i].Source, EventID: evs[i].ID})
		}
	}
	stored := make(map[inboxKey]inboxRow, len(keys))
	err := store.InboxGetMany(ctx, tx, a.consumer, keys, func(source, id string, sha []byte, seq int64) {
		stored[inboxKey{source, id}] = inboxRow{sha: slices.Clone(sha), seq: seq}
	})
	if err != nil {
		return nil, fmt.Errorf("apply batch: read inbox: %w", err)
	}
	return stored, nil
}

// recordConflicts inserts cs in one statement; like [RecordConflict],
// recording the same conflict twice keeps one row.
func recordConflicts(ctx context.Context, tx pgx.Tx, cs []ConflictRecord) error {
	if err := store.ConflictInsertMany(ctx, tx, cs); err != nil {
		return fmt.Errorf("apply batch: record %d conflicts: %w", len(cs), err)
	}
	return nil
}

// eventName labels an event in the error of a batch applied one event at
// a time (a handler without HandleBatch), as a Mux labels its runs'.
func eventName(ev consumer.Event) string { return ev.Source + "/" + ev.ID }
