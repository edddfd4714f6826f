package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sqlOutboxWrite           = load("outbox_write.sql")
	sqlOutboxLockKeys        = load("outbox_lock_keys.sql")
	sqlOutboxGetMany         = load("outbox_get_many.sql")
	sqlOutboxStats           = load("outbox_stats.sql")
	sqlSessionSetIdleTimeout = load("session_set_idle_timeout.sql")
	sqlOutboxClaim           = load("outbox_claim.sql")
	sqlOutboxKeyHeads        = load("outbox_key_heads.sql")
	sqlOutboxClaimIDs        = load("outbox_claim_ids.sql")
	sqlOutboxMarkSent        = load("outbox_mark_sent.sql")
	sqlOutboxDeleteSent      = load("outbox_delete_sent.sql")
	sqlOutboxMarkFailed      = load("outbox_mark_failed.sql")
	sqlOutboxDefer           = load("outbox_defer.sql")
	sqlOutboxNextDue         = load("outbox_next_due.sql")
	sqlOutboxPurgeScan       = load("outbox_purge_scan.sql")
	sqlOutboxPurgeDelete     = load("outbox_purge_delete.sql")
	sqlOutboxPage            = load("outbox_page.sql")
	sqlOutboxRequeue         = load("outbox_requeue.sql")
	sqlOutboxGetByEventID    = load("outbox_get_by_event_id.sql")
	sqlOutboxGetByID         = load("outbox_get_by_id.sql")
)

// OutboxWriteParams is one message for [OutboxWrite].
type OutboxWriteParams struct {
	EventID     string
	Subject     string
	Headers     *string // JSON object; nil when the message has none
	Payload     []byte
	OrderingKey *string // nil when the message has none
}

// OutboxLockKeys takes the outbox locks of keys in the order every
// writer takes them. A write of more than 1024 messages takes several
// statements, each of which locks only its own keys, sorted: two such
// writes could take shared keys in opposite orders across statements,
// so they lock all their keys with this first.
func OutboxLockKeys(ctx context.Context, q Querier, keys []string) error {
	_, err := q.Exec(ctx, sqlOutboxLockKeys, keys)
	return err
}

// OutboxWrite writes msgs (at most 1024), in order, with one statement,
// and returns the event ids it wrote; ids already in the outbox are
// skipped. When the transaction owns every id (each is the derived id of
// an event it claimed in the inbox) and none is in the outbox, the
// messages go into one pack; otherwise into one row each.
func OutboxWrite(ctx context.Context, q Querier, msgs []OutboxWriteParams) ([]string, error) {
	n := len(msgs)
	eventIDs, subjects, payloads := make([]string, n), make([]string, n), make([][]byte, n)
	headers, keys := make([]*string, n), make([]*string, n)
	anyHeader, anyKey := false, false
	for i, m := range msgs {
		eventIDs[i], subjects[i], payloads[i] = m.EventID, m.Subject, m.Payload
		headers[i], keys[i] = m.Headers, m.OrderingKey
		anyHeader, anyKey = anyHeader || m.Headers != nil, anyKey || m.OrderingKey != nil
	}
	// A column no message uses is sent as NULL rather than an array of
	// NULLs, as a pack stores it.
	if !anyHeader {
		headers = nil
	}
	if !anyKey {
		keys = nil
	}
	rows, err := q.Query(ctx, sqlOutboxWrite, eventIDs, subjects, headers, payloads, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// OutboxContent is the part of an outbox row that names its event.
type OutboxContent struct {
	EventID string
	Subject string
	Payload []byte
}

// OutboxGetMany reads the subject and payload of the rows of eventIDs.
func OutboxGetMany(ctx context.Context, q Querier, eventIDs []string) ([]OutboxContent, error) {
	rows, err := q.Query(ctx, sqlOutboxGetMany, eventIDs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxContent, error) {
		var c OutboxContent
		err := row.Scan(&c.EventID, &c.Subject, &c.Payload)
		return c, err
	})
}

// OutboxCounts are the outbox rows by status.
type OutboxCounts struct {
	Pending, Dead, Sent int64
	// OldestPendingMs is the age in milliseconds of the oldest pending row,
	// nil when there is none.
	OldestPendingMs *float64
}

// OutboxStats counts the outbox rows by status in one snapshot.
func OutboxStats(ctx context.Context, q Querier) (OutboxCounts, error) {
	var c OutboxCounts
	err := q.QueryRow(ctx, sqlOutboxStats).Scan(&c.Pending, &c.Dead, &c.Sent, &c.OldestPendingMs)
	return c, err
}

// OutboxRow is one claimed outbox row.
type OutboxRow struct {
	ID          int64
	EventID     string
	Subject     string
	Headers     []byte // empty when the row has none
	Payload     []byte
	OrderingKey *string // nil when the row has none
	KeySeq      *int64
	Attempts    int
	NextAttempt time.Time
}

func scanOutboxRows(rows pgx.Rows) ([]OutboxRow, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		var headers string
		err := row.Scan(&o.ID, &o.EventID, &o.Subject, &headers, &o.Payload, &o.OrderingKey, &o.KeySeq, &o.Attempts, &o.NextAttempt)
		o.Headers = []byte(headers)
		if o.OrderingKey != nil && *o.OrderingKey == "" {
			o.OrderingKey = nil
		}
		return o, err
	})
}

// OutboxClaim sets the transaction's idle_in_transaction_session_timeout
// to idleMs milliseconds (so a relay stuck with the transaction open loses
// its session and with it the claim) and locks up to limit due pending
// rows, oldest due first, skipping rows others hold: one round trip.
func OutboxClaim(ctx context.Context, tx Querier, idleMs string, limit int) ([]OutboxRow, error) {
	b := &pgx.Batch{}
	b.Queue(sqlSessionSetIdleTimeout, idleMs)
	b.Queue(sqlOutboxClaim, limit)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rs, err := br.Query()
	if err != nil {
		return nil, err
	}
	rows, err := scanOutboxRows(rs)
	if err != nil {
		return nil, err
	}
	return rows, br.Close()
}

// OutboxKeyHead is one of the first pending rows of an ordering key.
type OutboxKeyHead struct {
	Key    string
	ID     int64
	KeySeq *int64 // nil for a row written with triggers off: it sorts last
	Due    bool
	Next   time.Time
}

// OutboxKeyHeadsParams asks for the first Count pending rows of the
// ordering key Key.
type OutboxKeyHeadsParams struct {
	Key   string
	Count int32
}

func keyHeadsColumns(want []OutboxKeyHeadsParams) (keys []string, counts []int32) {
	keys, counts = make([]string, len(want)), make([]int32, len(want))
	for i, w := range want {
		keys[i], counts[i] = w.Key, w.Count
	}
	return keys, counts
}

// OutboxKeyHeads reads the pending rows that want asks for, in key_seq
// order per key.
func OutboxKeyHeads(ctx context.Context, q Querier, want []OutboxKeyHeadsParams) ([]OutboxKeyHead, error) {
	keys, counts := keyHeadsColumns(want)
	rows, err := q.Query(ctx, sqlOutboxKeyHeads, keys, counts)
	if err != nil {
		return nil, err
	}
	return collectKeyHeads(rows)
}

func collectKeyHeads(rows pgx.Rows) ([]OutboxKeyHead, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxKeyHead, error) {
		var h OutboxKeyHead
		err := row.Scan(&h.Key, &h.ID, &h.KeySeq, &h.Due, &h.Next)
		return h, err
	})
}

// OutboxKeyHeadsAndPacksAhead is [OutboxKeyHeads] and the packs ahead of them
// in one round trip, both with a fresh snapshot: the pending rows that
// want asks for, and the pending packs not in mine that come before
// key_seq before and carry one of want's keys.
func OutboxKeyHeadsAndPacksAhead(ctx context.Context, q Querier, want []OutboxKeyHeadsParams, before int64, mine []int64) ([]OutboxKeyHead, []OutboxPackAhead, error) {
	keys, counts := keyHeadsColumns(want)
	b := &pgx.Batch{}
	b.Queue(sqlOutboxKeyHeads, keys, counts)
	b.Queue(sqlOutboxPackListAhead, before, mine, keys)
	br := q.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	heads, err := collectKeyHeads(rows)
	if err != nil {
		return nil, nil, err
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, err
	}
	ahead, err := collectPacksAhead(rows)
	if err != nil {
		return nil, nil, err
	}
	return heads, ahead, br.Close()
}

// OutboxClaimIDs locks those of ids that are still due and pending and
// that nobody else holds.
func OutboxClaimIDs(ctx context.Context, tx Querier, ids []int64) ([]OutboxRow, error) {
	rows, err := tx.Query(ctx, sqlOutboxClaimIDs, ids)
	if err != nil {
		return nil, err
	}
	return scanOutboxRows(rows)
}

// OutboxMarkSentParams is one row published to the stream at StreamSeq.
type OutboxMarkSentParams struct {
	ID        int64
	StreamSeq int64
}

// QueueOutboxMarkSent queues marking rows sent with their stream
// sequences.
func QueueOutboxMarkSent(b *pgx.Batch, rows []OutboxMarkSentParams) {
	ids, seqs := make([]int64, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		ids[i], seqs[i] = r.ID, r.StreamSeq
	}
	b.Queue(sqlOutboxMarkSent, ids, seqs)
}

// QueueOutboxDeleteSent queues deleting rows ids, published and not kept.
func QueueOutboxDeleteSent(b *pgx.Batch, ids []int64) {
	b.Queue(sqlOutboxDeleteSent, ids)
}

// OutboxMarkFailedParams is one failed attempt of row ID.
type OutboxMarkFailedParams struct {
	ID      int64
	Error   string // the row's last_error
	DelayUs int64  // from now to the next attempt
	// Permanent makes the row dead whatever its attempts.
	Permanent bool
	// Counted false records the error and the delay without counting an
	// attempt toward maxAttempts: the broker refused for lack of room,
	// which is not the row's fault.
	Counted bool
}

// QueueOutboxMarkFailed queues recording a failed attempt of each of rows:
// last_error, the next attempt DelayUs microseconds from now, and status
// dead when Permanent or when a counted attempt reaches maxAttempts.
func QueueOutboxMarkFailed(b *pgx.Batch, rows []OutboxMarkFailedParams, maxAttempts int) {
	n := len(rows)
	ids, errs, delayUs := make([]int64, n), make([]string, n), make([]int64, n)
	permanent, counted := make([]bool, n), make([]bool, n)
	for i, r := range rows {
		ids[i], errs[i], delayUs[i] = r.ID, r.Error, r.DelayUs
		permanent[i], counted[i] = r.Permanent, r.Counted
	}
	b.Queue(sqlOutboxMarkFailed, ids, errs, delayUs, permanent, maxAttempts, counted)
}

// OutboxDeferParams moves row ID behind row Blocker.
type OutboxDeferParams struct {
	ID      int64
	Blocker int64
}

// QueueOutboxDefer queues moving each row to its blocker's next attempt
// when the blocker is pending and due later; queued after
// QueueOutboxMarkFailed it sees the blockers' new times.
func QueueOutboxDefer(b *pgx.Batch, rows []OutboxDeferParams) {
	ids, blockers := make([]int64, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		ids[i], blockers[i] = r.ID, r.Blocker
	}
	b.Queue(sqlOutboxDefer, ids, blockers)
}

// OutboxNextDue is how many milliseconds until the earliest pending row
// that is not yet due becomes due, nil when there is none.
func OutboxNextDue(ctx context.Context, q Querier) (*int64, error) {
	var ms *int64
	err := q.QueryRow(ctx, sqlOutboxNextDue).Scan(&ms)
	return ms, err
}

// OutboxPurgeCandidate is one row of the retention walk.
type OutboxPurgeCandidate struct {
	ID      int64
	Recent  bool // created at or after the cutoff
	Expired bool // sent before the cutoff
}

// OutboxPurgeScan reads up to limit rows after id after, in id order.
func OutboxPurgeScan(ctx context.Context, q Querier, after int64, cutoff time.Time, limit int) ([]OutboxPurgeCandidate, error) {
	rows, err := q.Query(ctx, sqlOutboxPurgeScan, after, cutoff, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxPurgeCandidate, error) {
		var c OutboxPurgeCandidate
		err := row.Scan(&c.ID, &c.Recent, &c.Expired)
		return c, err
	})
}

// OutboxPurgeDelete deletes those of ids that are still sent before cutoff,
// skipping rows others hold, and returns how many it deleted.
func OutboxPurgeDelete(ctx context.Context, q Querier, ids []int64, cutoff time.Time) (int64, error) {
	tag, err := q.Exec(ctx, sqlOutboxPurgeDelete, ids, cutoff)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

var sqlOutboxList = load("outbox_list.sql")

// OutboxEntry is one outbox row as [OutboxList] reads it.
type OutboxEntry struct {
	EventID     string
	Subject     string
	Headers     string // JSON object; "{}" when the row has none
	Payload     []byte
	OrderingKey string // "" when the row has none
	Status      string // pending, sent or dead
	StreamSeq   *int64 // EVENTS sequence once sent
}

// OutboxList reads the outbox rows whose event id starts with prefix (""
// for all), in insertion order.
func OutboxList(ctx context.Context, q Querier, prefix string) ([]OutboxEntry, error) {
	rows, err := q.Query(ctx, sqlOutboxList, prefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxEntry, error) {
		var o OutboxEntry
		err := row.Scan(&o.EventID, &o.Subject, &o.Headers, &o.Payload, &o.OrderingKey, &o.Status, &o.StreamSeq)
		return o, err
	})
}

// OutboxListed is an outbox row as operators list it (no payload).
type OutboxListed struct {
	ID            int64
	EventID       string
	Subject       string
	Attempts      int
	LastError     string
	CreatedAt     time.Time
	NextAttemptAt time.Time
}

// OutboxPage returns one page of the rows in status ("dead" or
// "pending"), newest first, with ids below before (0: from the newest).
func OutboxPage(ctx context.Context, q Querier, status string, before int64, limit int) ([]OutboxListed, error) {
	rows, err := q.Query(ctx, sqlOutboxPage, status, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxListed, error) {
		var o OutboxListed
		err := row.Scan(&o.ID, &o.EventID, &o.Subject, &o.Attempts, &o.LastError, &o.CreatedAt, &o.NextAttemptAt)
		return o, err
	})
}

// OutboxRequeue puts the dead row id back to pending, due now, with its
// attempts reset, and wakes the relays; it reports whether the row was
// dead.
func OutboxRequeue(ctx context.Context, q Querier, id int64) (bool, error) {
	return returnsRows(ctx, q, sqlOutboxRequeue, id)
}

// OutboxState is the relay state of one outbox row.
type OutboxState struct {
	ID        int64
	EventID   string
	Subject   string
	Status    string // pending, sent or dead
	StreamSeq uint64 // EVENTS sequence once sent
}

// OutboxGetByEventID returns the row of eventID, or pgx.ErrNoRows.
func OutboxGetByEventID(ctx context.Context, q Querier, eventID string) (OutboxState, error) {
	return scanOutboxState(q.QueryRow(ctx, sqlOutboxGetByEventID, eventID))
}

// OutboxGetByID returns the row id, or pgx.ErrNoRows.
func OutboxGetByID(ctx context.Context, q Querier, id int64) (OutboxState, error) {
	return scanOutboxState(q.QueryRow(ctx, sqlOutboxGetByID, id))
}

func scanOutboxState(row pgx.Row) (OutboxState, error) {
	var o OutboxState
	var seq int64
	err := row.Scan(&o.ID, &o.EventID, &o.Subject, &o.Status, &seq)
	o.StreamSeq = uint64(seq)
	return o, err
}
