package consumer

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

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

// claimSetSQL claims many events; $1 is the consumer, then one array per
// column. The returned keys are the events claimed now; the others were
// in the inbox already (or claimed by a racing delivery that committed
// first: the INSERT waits for it, as in the per-event claim).
const claimSetSQL = `
		INSERT INTO hookbridge.inbox (consumer, source, event_id, event_type, body_sha256, stream_seq)
		SELECT $1, k.source, k.event_id, k.event_type, k.body_sha256, k.stream_seq
		FROM unnest($2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[])
			AS k(source, event_id, event_type, body_sha256, stream_seq)
		ON CONFLICT DO NOTHING
		RETURNING source, event_id`

// readRepeatsSQL reads the inbox rows of the events the claim did not
// insert. It is a statement of its own, after the claim: in READ
// COMMITTED it sees a row that a racing delivery committed while the claim
// waited for it, which the claim's own snapshot does not.
const readRepeatsSQL = `
		SELECT i.source, i.event_id, i.body_sha256, i.stream_seq
		FROM unnest($2::text[], $3::text[]) AS k(source, event_id)
		JOIN hookbridge.inbox i ON i.consumer = $1 AND i.source = k.source AND i.event_id = k.event_id`

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
func (a *applier) setwise(ctx context.Context, evs []Event, results []Result) *setFailure {
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
	var news []Event
	var newIdx []int
	var conflicts []ConflictRecord
	for i, ev := range evs {
		k := inboxKey{ev.Source, ev.ID}
		if first[k] == i && claimed[k] {
			news = append(news, ev)
			newIdx = append(newIdx, i)
			current[k] = inboxRow{sha: ev.BodySHA256[:], seq: int64(ev.StreamSeq)}
			results[i] = Result{Outcome: Processed}
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
			results[i] = Result{Outcome: Duplicate}
			continue
		}
		conflicts = append(conflicts, ConflictRecord{DetectedBy: a.consumer, Source: ev.Source, EventID: ev.ID, EventType: ev.Type,
			OriginalSHA256: row.sha, OriginalSeq: row.seq, RejectedSeq: int64(ev.StreamSeq), RejectedBody: ev.Body})
		results[i] = Result{Outcome: Conflict}
	}
	if len(conflicts) > 0 {
		if err := recordConflicts(ctx, tx, conflicts); err != nil {
			return unlocated(err)
		}
	}
	if len(news) > 0 {
		if be := handleRun(ctx, tx, a.h, news); be != nil {
			f := &setFailure{err: fmt.Errorf("apply batch: handler: %w", be)}
			if be.lo >= 0 && be.lo < be.hi && be.hi <= len(news) {
				f.lo, f.hi = newIdx[be.lo], newIdx[be.hi-1]+1
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
// deletes the failure counters of redelivered messages in the same round
// trip. It returns the keys it claimed.
func (a *applier) claimSet(ctx context.Context, tx pgx.Tx, evs []Event, uniq []int) (claimed map[inboxKey]bool, cleared bool, err error) {
	sorted := slices.Clone(uniq)
	slices.SortFunc(sorted, func(x, y int) int {
		return cmp.Or(cmp.Compare(evs[x].Source, evs[y].Source), cmp.Compare(evs[x].ID, evs[y].ID))
	})
	n := len(sorted)
	sources, ids, types := make([]string, n), make([]string, n), make([]string, n)
	hashes, seqs := make([][]byte, n), make([]int64, n)
	for j, i := range sorted {
		ev := &evs[i]
		sources[j], ids[j], types[j], hashes[j], seqs[j] = ev.Source, ev.ID, ev.Type, ev.BodySHA256[:], int64(ev.StreamSeq)
	}
	b := &pgx.Batch{}
	b.Queue(claimSetSQL, a.consumer, sources, ids, types, hashes, seqs)
	clear := queueClearFailures(b, a.consumer, evs)
	br := tx.SendBatch(ctx, b)
	defer br.Close() //nolint:errcheck // the error is read below
	rows, err := br.Query()
	if err != nil {
		return nil, false, fmt.Errorf("apply batch: claim inbox: %w", err)
	}
	claimed = make(map[inboxKey]bool, n)
	var k inboxKey
	_, err = pgx.ForEachRow(rows, []any{&k.source, &k.id}, func() error {
		claimed[k] = true
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("apply batch: claim inbox: %w", err)
	}
	if clear {
		if cleared, err = execCleared(br); err != nil {
			return nil, false, fmt.Errorf("apply batch: clear failure counts: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, false, fmt.Errorf("apply batch: claim inbox: %w", err)
	}
	return claimed, cleared, nil
}

// readRepeats reads the inbox rows of the keys at uniq that were not
// claimed.
func (a *applier) readRepeats(ctx context.Context, tx pgx.Tx, evs []Event, uniq []int, claimed map[inboxKey]bool) (map[inboxKey]inboxRow, error) {
	var sources, ids []string
	for _, i := range uniq {
		if !claimed[inboxKey{evs[i].Source, evs[i].ID}] {
			sources = append(sources, evs[i].Source)
			ids = append(ids, evs[i].ID)
		}
	}
	rows, err := tx.Query(ctx, readRepeatsSQL, a.consumer, sources, ids)
	if err != nil {
		return nil, fmt.Errorf("apply batch: read inbox: %w", err)
	}
	stored := make(map[inboxKey]inboxRow, len(ids))
	var k inboxKey
	var r inboxRow
	_, err = pgx.ForEachRow(rows, []any{&k.source, &k.id, &r.sha, &r.seq}, func() error {
		stored[k] = inboxRow{sha: slices.Clone(r.sha), seq: r.seq}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("apply batch: read inbox: %w", err)
	}
	return stored, nil
}

// recordConflicts inserts cs in one statement; like [RecordConflict],
// recording the same conflict twice keeps one row.
func recordConflicts(ctx context.Context, tx pgx.Tx, cs []ConflictRecord) error {
	if err := store.InsertConflicts(ctx, tx, cs); err != nil {
		return fmt.Errorf("apply batch: record %d conflicts: %w", len(cs), err)
	}
	return nil
}
