package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sqlOutboxPackClaim       = load("outbox_pack_claim.sql")
	sqlOutboxPackListAhead   = load("outbox_pack_list_ahead.sql")
	sqlOutboxPackMarkSent    = load("outbox_pack_mark_sent.sql")
	sqlOutboxPackDelete      = load("outbox_pack_delete.sql")
	sqlOutboxInsertUnpacked  = load("outbox_insert_unpacked.sql")
	sqlOutboxPackPurgeScan   = load("outbox_pack_purge_scan.sql")
	sqlOutboxPackPurgeDelete = load("outbox_pack_purge_delete.sql")
)

// OutboxPack is one claimed pack: the messages one transaction enqueued
// in one call, as parallel slices. Message i has id FirstID+i and, when
// it has an ordering key, key_seq KeySeq+i.
type OutboxPack struct {
	FirstID   int64
	KeySeq    int64
	CreatedAt time.Time
	EventIDs  []string
	Subjects  []string
	Keys      []*string // nil when no message has a key
	Headers   []*string // JSON objects; nil when no message has headers
	Payloads  [][]byte
}

// OutboxPackClaim locks pending packs in key_seq order, skipping packs
// others hold, until they carry budget messages (at least one pack).
func OutboxPackClaim(ctx context.Context, tx Querier, budget int) ([]OutboxPack, error) {
	rows, err := tx.Query(ctx, sqlOutboxPackClaim, budget)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxPack, error) {
		var p OutboxPack
		err := row.Scan(&p.FirstID, &p.KeySeq, &p.CreatedAt, &p.EventIDs, &p.Subjects, &p.Keys, &p.Headers, &p.Payloads)
		return p, err
	})
}

// OutboxPackAhead is a pending pack held elsewhere that shares an
// ordering key with claimed messages and comes before them.
type OutboxPackAhead struct {
	FirstID int64
	KeySeq  int64
	Keys    []*string
}

func collectPacksAhead(rows pgx.Rows) ([]OutboxPackAhead, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxPackAhead, error) {
		var a OutboxPackAhead
		err := row.Scan(&a.FirstID, &a.KeySeq, &a.Keys)
		return a, err
	})
}

// QueueOutboxPackMarkSent queues marking packs firstIDs sent: pack i's
// stream sequences are seqs[lo[i]-1 : hi[i]] (1-based, inclusive, as SQL
// slices are).
func QueueOutboxPackMarkSent(b *pgx.Batch, firstIDs, seqs []int64, lo, hi []int32) {
	b.Queue(sqlOutboxPackMarkSent, firstIDs, seqs, lo, hi)
}

// QueueOutboxPackDelete queues deleting packs firstIDs.
func QueueOutboxPackDelete(b *pgx.Batch, firstIDs []int64) {
	b.Queue(sqlOutboxPackDelete, firstIDs)
}

// Unpacked are messages of packs written as rows with their outcome, as
// parallel slices. Status is pending, sent or dead; DelayUs is from now to
// the next attempt; Seq is the stream sequence of a sent one.
type Unpacked struct {
	IDs       []int64
	EventIDs  []string
	Subjects  []string
	Headers   []*string
	Payloads  [][]byte
	Keys      []*string
	KeySeqs   []*int64
	CreatedAt []time.Time
	Status    []string
	Attempts  []int32
	Errors    []*string
	DelayUs   []int64
	Seqs      []*int64
}

// QueueOutboxInsertUnpacked queues inserting u's messages as rows.
func QueueOutboxInsertUnpacked(b *pgx.Batch, u *Unpacked) {
	b.Queue(sqlOutboxInsertUnpacked, u.IDs, u.EventIDs, u.Subjects, u.Headers, u.Payloads, u.Keys, u.KeySeqs,
		u.CreatedAt, u.Status, u.Attempts, u.Errors, u.DelayUs, u.Seqs)
}

// OutboxPackPurgeScan is [OutboxPurgeScan] for packs: up to limit packs
// after first id after, in id order.
func OutboxPackPurgeScan(ctx context.Context, q Querier, after int64, cutoff time.Time, limit int) ([]OutboxPurgeCandidate, error) {
	rows, err := q.Query(ctx, sqlOutboxPackPurgeScan, after, cutoff, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxPurgeCandidate, error) {
		var c OutboxPurgeCandidate
		err := row.Scan(&c.ID, &c.Recent, &c.Expired)
		return c, err
	})
}

// OutboxPackPurgeDelete deletes those of packs firstIDs still sent before
// cutoff, skipping packs others hold, and returns how many messages they
// held.
func OutboxPackPurgeDelete(ctx context.Context, q Querier, firstIDs []int64, cutoff time.Time) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, sqlOutboxPackPurgeDelete, firstIDs, cutoff).Scan(&n)
	return n, err
}
