package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sqlInboxClaim        = load("inbox_claim.sql")
	sqlInboxClaimMany    = load("inbox_claim_many.sql")
	sqlInboxGetMany      = load("inbox_get_many.sql")
	sqlInboxGet          = load("inbox_get.sql")
	sqlInboxGetHash      = load("inbox_get_hash.sql")
	sqlInboxDelete       = load("inbox_delete.sql")
	sqlInboxPrune        = load("inbox_prune.sql")
	sqlInboxListForEvent = load("inbox_list_for_event.sql")
)

// InboxEntry is what the inbox claim of one event writes.
type InboxEntry struct {
	Source     string
	EventID    string
	EventType  string
	BodySHA256 []byte
	StreamSeq  uint64
}

func claimArgs(consumer string, e InboxEntry) []any {
	return []any{consumer, e.Source, e.EventID, e.EventType, e.BodySHA256, int64(e.StreamSeq)}
}

// InboxClaim claims e for consumer and reports whether it did (false: the
// key was in the inbox already, or a racing delivery committed it first).
func InboxClaim(ctx context.Context, q Querier, consumer string, e InboxEntry) (bool, error) {
	tag, err := q.Exec(ctx, sqlInboxClaim, claimArgs(consumer, e)...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// QueueInboxClaim queues the claim of e into b; read its result with
// [ReadInboxClaim] in queue order.
func QueueInboxClaim(b *pgx.Batch, consumer string, e InboxEntry) {
	b.Queue(sqlInboxClaim, claimArgs(consumer, e)...)
}

// ReadInboxClaim reads the result of a queued [QueueInboxClaim].
func ReadInboxClaim(br pgx.BatchResults) (bool, error) {
	tag, err := br.Exec()
	return tag.RowsAffected() == 1, err
}

// QueueInboxClaimMany queues the claim of es for consumer in one
// statement, in the order given (sort them by key so that racing batches
// lock keys in the same order); read its result with [ReadInboxClaimMany].
func QueueInboxClaimMany(b *pgx.Batch, consumer string, es []InboxEntry) {
	n := len(es)
	sources, ids, types := make([]string, n), make([]string, n), make([]string, n)
	hashes, seqs := make([][]byte, n), make([]int64, n)
	for i, e := range es {
		sources[i], ids[i], types[i], hashes[i], seqs[i] = e.Source, e.EventID, e.EventType, e.BodySHA256, int64(e.StreamSeq)
	}
	b.Queue(sqlInboxClaimMany, consumer, sources, ids, types, hashes, seqs)
}

// ReadInboxClaimMany reads the result of a queued [QueueInboxClaimMany],
// calling claimed for every key it claimed.
func ReadInboxClaimMany(br pgx.BatchResults, claimed func(source, eventID string)) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	var source, id string
	_, err = pgx.ForEachRow(rows, []any{&source, &id}, func() error {
		claimed(source, id)
		return nil
	})
	return err
}

// EventKey names one event: its source and its id there.
type EventKey struct {
	Source  string
	EventID string
}

// eventKeyColumns splits keys into the parallel arrays the statements
// unnest.
func eventKeyColumns(keys []EventKey) (sources, eventIDs []string) {
	sources, eventIDs = make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		sources[i], eventIDs[i] = k.Source, k.EventID
	}
	return sources, eventIDs
}

// InboxGetMany reads the consumer's inbox rows of keys, calling fn for
// each row found. sha is only valid during the call.
func InboxGetMany(ctx context.Context, q Querier, consumer string, keys []EventKey, fn func(source, eventID string, sha []byte, seq int64)) error {
	sources, eventIDs := eventKeyColumns(keys)
	rows, err := q.Query(ctx, sqlInboxGetMany, consumer, sources, eventIDs)
	if err != nil {
		return err
	}
	var source, id string
	var sha []byte
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&source, &id, &sha, &seq}, func() error {
		fn(source, id, sha, seq)
		return nil
	})
	return err
}

// InboxGet reads the body hash and stream sequence the consumer's inbox
// holds for a key, or pgx.ErrNoRows.
func InboxGet(ctx context.Context, q Querier, consumer, source, eventID string) (sha []byte, seq int64, err error) {
	err = q.QueryRow(ctx, sqlInboxGet, consumer, source, eventID).Scan(&sha, &seq)
	return sha, seq, err
}

// InboxGetHash reads the body hash the consumer's inbox holds for a key,
// or pgx.ErrNoRows.
func InboxGetHash(ctx context.Context, q Querier, consumer, source, eventID string) (sha []byte, err error) {
	err = q.QueryRow(ctx, sqlInboxGetHash, consumer, source, eventID).Scan(&sha)
	return sha, err
}

// InboxDelete deletes the consumer's inbox row of a key.
func InboxDelete(ctx context.Context, q Querier, consumer, source, eventID string) error {
	_, err := q.Exec(ctx, sqlInboxDelete, consumer, source, eventID)
	return err
}

// InboxPrune deletes at most limit inbox rows applied before olderThan and
// returns how many it deleted.
func InboxPrune(ctx context.Context, q Querier, olderThan time.Time, limit int) (int64, error) {
	tag, err := q.Exec(ctx, sqlInboxPrune, olderThan, limit)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// InboxApply is one consumer's inbox row of an event.
type InboxApply struct {
	Consumer   string
	StreamSeq  uint64
	AppliedAt  time.Time
	BodySHA256 []byte
}

// InboxListForEvent returns the inbox rows of one event for any of consumers.
func InboxListForEvent(ctx context.Context, q Querier, consumers []string, source, eventID string) ([]InboxApply, error) {
	rows, err := q.Query(ctx, sqlInboxListForEvent, consumers, source, eventID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (InboxApply, error) {
		var a InboxApply
		var seq int64
		err := row.Scan(&a.Consumer, &seq, &a.AppliedAt, &a.BodySHA256)
		a.StreamSeq = uint64(seq)
		return a, err
	})
}
