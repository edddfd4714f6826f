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

// OutboxPackMarkSentParams is one pack published whole: StreamSeqs[i] is
// the stream sequence of its message i.
type OutboxPackMarkSentParams struct {
	FirstID    int64
	StreamSeqs []int64
}

// QueueOutboxPackMarkSent queues marking packs sent with their stream
// sequences.
func QueueOutboxPackMarkSent(b *pgx.Batch, packs []OutboxPackMarkSentParams) {
	// The statement takes every sequence in one array and each pack's
	// bounds in it (1-based, inclusive, as SQL slices are): a Postgres
	// array cannot hold arrays of different lengths.
	firstIDs, lo, hi := make([]int64, len(packs)), make([]int32, len(packs)), make([]int32, len(packs))
	var seqs []int64
	for i, p := range packs {
		firstIDs[i], lo[i] = p.FirstID, int32(len(seqs)+1)
		seqs = append(seqs, p.StreamSeqs...)
		hi[i] = int32(len(seqs))
	}
	b.Queue(sqlOutboxPackMarkSent, firstIDs, seqs, lo, hi)
}

// QueueOutboxPackDelete queues deleting packs firstIDs.
func QueueOutboxPackDelete(b *pgx.Batch, firstIDs []int64) {
	b.Queue(sqlOutboxPackDelete, firstIDs)
}

// OutboxInsertUnpackedParams is one message of a pack written as a row,
// with its outcome.
type OutboxInsertUnpackedParams struct {
	ID          int64
	EventID     string
	Subject     string
	Headers     *string
	Payload     []byte
	OrderingKey *string
	KeySeq      *int64
	CreatedAt   time.Time
	Status      string // pending, sent or dead
	Attempts    int32
	Error       *string
	DelayUs     int64  // from now to the next attempt
	StreamSeq   *int64 // of a sent one
}

// QueueOutboxInsertUnpacked queues inserting rows.
func QueueOutboxInsertUnpacked(b *pgx.Batch, rows []OutboxInsertUnpackedParams) {
	n := len(rows)
	ids, eventIDs, subjects := make([]int64, n), make([]string, n), make([]string, n)
	headers, payloads, keys, keySeqs := make([]*string, n), make([][]byte, n), make([]*string, n), make([]*int64, n)
	createdAt, status, attempts := make([]time.Time, n), make([]string, n), make([]int32, n)
	errs, delayUs, seqs := make([]*string, n), make([]int64, n), make([]*int64, n)
	for i, r := range rows {
		ids[i], eventIDs[i], subjects[i] = r.ID, r.EventID, r.Subject
		headers[i], payloads[i], keys[i], keySeqs[i] = r.Headers, r.Payload, r.OrderingKey, r.KeySeq
		createdAt[i], status[i], attempts[i] = r.CreatedAt, r.Status, r.Attempts
		errs[i], delayUs[i], seqs[i] = r.Error, r.DelayUs, r.StreamSeq
	}
	b.Queue(sqlOutboxInsertUnpacked, ids, eventIDs, subjects, headers, payloads, keys, keySeqs,
		createdAt, status, attempts, errs, delayUs, seqs)
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
