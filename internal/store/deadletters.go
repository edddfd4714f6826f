package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sqlDeadLetterInsert                    = load("dead_letter_insert.sql")
	sqlDeadLetterList                      = load("dead_letter_list.sql")
	sqlDeadLetterGet                       = load("dead_letter_get.sql")
	sqlDeadLetterResolve                   = load("dead_letter_resolve.sql")
	sqlDeadLetterNoteError                 = load("dead_letter_note_error.sql")
	sqlDeadLetterLock                      = load("dead_letter_lock.sql")
	sqlDeadLetterCountUnresolvedByConsumer = load("dead_letter_count_unresolved_by_consumer.sql")
	sqlFailureClear                        = load("failure_clear.sql")
	sqlFailureClearMany                    = load("failure_clear_many.sql")
	sqlFailureIncrement                    = load("failure_increment.sql")
	sqlFailurePostpone                     = load("failure_postpone.sql")
	sqlFailureMarkPassedBy                 = load("failure_mark_passed_by.sql")
	sqlMessageLock                         = load("message_lock.sql")
	sqlDeadLetterPage                      = load("dead_letter_page.sql")
	sqlDeadLetterDiscard                   = load("dead_letter_discard.sql")
	sqlDeadLetterListForEvent              = load("dead_letter_list_for_event.sql")
	sqlDeadLetterMarkPassed                = load("dead_letter_mark_passed.sql")
	sqlDeadLetterMarkPassedBy              = load("dead_letter_mark_passed_by.sql")
	sqlDeadLetterFindUnresolved            = load("dead_letter_find_unresolved.sql")
	sqlDeadLetterFindAny                   = load("dead_letter_find_any.sql")
	sqlFailureListForEvent                 = load("failure_list_for_event.sql")
	sqlFailureList                         = load("failure_list.sql")
	sqlFailureCountByConsumer              = load("failure_count_by_consumer.sql")
)

// DeadLetter is one row of hookbridge.dead_letters.
type DeadLetter struct {
	ID         int64      `json:"id"`
	Consumer   string     `json:"consumer"`
	Source     string     `json:"source"`
	EventID    string     `json:"event_id"`
	EventType  string     `json:"event_type"`
	Subject    string     `json:"subject"`
	StreamSeq  uint64     `json:"stream_seq"`
	Deliveries int        `json:"deliveries"`
	Reason     string     `json:"reason"`
	LastError  string     `json:"last_error"`
	Body       []byte     `json:"-"` // read by DeadLetterGet only
	DeadAt     time.Time  `json:"dead_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Resolution string     `json:"resolution,omitempty"`
	// ResolutionNote is the reason an operator gave when discarding.
	ResolutionNote string `json:"resolution_note,omitempty"`
	// OrderingKey is the event's ordering key ("" for an unkeyed event).
	OrderingKey string `json:"ordering_key,omitempty"`
	// PassedAt is when a later event of the same key was applied (nil:
	// none yet); PassedByEvent and PassedBySeq name the first transaction's
	// latest event of the key.
	PassedAt      *time.Time `json:"passed_at,omitempty"`
	PassedByEvent string     `json:"passed_by_event,omitempty"`
	PassedBySeq   uint64     `json:"passed_by_seq,omitempty"`
}

// DeadLetterInsert inserts d (LastError as given) and deletes the
// message's failure counter in the same statement. Inserting the same
// message again (same consumer, source, event id and stream sequence)
// keeps one row and only refreshes the delivery count and error of an
// unresolved one. Run it under [MessageLock].
func DeadLetterInsert(ctx context.Context, q Querier, d DeadLetter) error {
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	_, err := q.Exec(ctx, sqlDeadLetterInsert,
		d.Consumer, d.Source, d.EventID, d.EventType, d.Subject, int64(d.StreamSeq), d.Deliveries,
		d.Reason, d.LastError, body, d.OrderingKey)
	return err
}

// PassingEvent is the event of its (source, ordering key) with the highest
// stream sequence in a transaction: it passes the key's earlier dead
// letters.
type PassingEvent struct {
	Source, OrderingKey, EventID string
	StreamSeq                    uint64
}

// QueueDeadLetterMarkPassedBy queues the mark of the dead letters that evs
// pass (one per source and key); read it with [ReadDeadLetterMarkPassedBy].
func QueueDeadLetterMarkPassedBy(b *pgx.Batch, consumer string, evs []PassingEvent) {
	n := len(evs)
	sources, keys, ids, seqs := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, e := range evs {
		sources[i], keys[i], ids[i], seqs[i] = e.Source, e.OrderingKey, e.EventID, int64(e.StreamSeq)
	}
	b.Queue(sqlDeadLetterMarkPassedBy, consumer, sources, keys, ids, seqs)
}

// ReadDeadLetterMarkPassedBy reads the result of a queued
// [QueueDeadLetterMarkPassedBy]: whether it marked any.
func ReadDeadLetterMarkPassedBy(br pgx.BatchResults) (bool, error) {
	tag, err := br.Exec()
	return tag.RowsAffected() > 0, err
}

// QueueFailureMarkPassedBy queues the mark of the postponed messages that
// evs pass (one per source and key), which their dead letters take over;
// read it with [ReadFailureMarkPassedBy].
func QueueFailureMarkPassedBy(b *pgx.Batch, consumer string, evs []PassingEvent) {
	n := len(evs)
	sources, keys, ids, seqs := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, e := range evs {
		sources[i], keys[i], ids[i], seqs[i] = e.Source, e.OrderingKey, e.EventID, int64(e.StreamSeq)
	}
	b.Queue(sqlFailureMarkPassedBy, consumer, sources, keys, ids, seqs)
}

// ReadFailureMarkPassedBy reads the result of a queued
// [QueueFailureMarkPassedBy]: whether it marked any.
func ReadFailureMarkPassedBy(br pgx.BatchResults) (bool, error) {
	tag, err := br.Exec()
	return tag.RowsAffected() > 0, err
}

// DeadLetterFindUnresolved returns which of msgs (by stream sequence) have
// an unresolved dead letter of consumer.
func DeadLetterFindUnresolved(ctx context.Context, q Querier, consumer string, msgs []MessageKey) (map[uint64]bool, error) {
	return deadLetterFind(ctx, q, sqlDeadLetterFindUnresolved, consumer, msgs)
}

// DeadLetterFindAny returns which of msgs (by stream sequence) consumer
// dead-lettered, resolved since or not.
func DeadLetterFindAny(ctx context.Context, q Querier, consumer string, msgs []MessageKey) (map[uint64]bool, error) {
	return deadLetterFind(ctx, q, sqlDeadLetterFindAny, consumer, msgs)
}

func deadLetterFind(ctx context.Context, q Querier, sql, consumer string, msgs []MessageKey) (map[uint64]bool, error) {
	sources, ids, seqs := make([]string, len(msgs)), make([]string, len(msgs)), make([]int64, len(msgs))
	for i, m := range msgs {
		sources[i], ids[i], seqs[i] = m.Source, m.EventID, int64(m.StreamSeq)
	}
	rows, err := q.Query(ctx, sql, consumer, sources, ids, seqs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	dead := map[uint64]bool{}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		dead[uint64(seq)] = true
	}
	return dead, rows.Err()
}

// DeadLetterMarkPassed records on the dead letter of message k that the
// later event laterID (stream sequence laterSeq) of its ordering key was
// applied; only the first such event is kept.
func DeadLetterMarkPassed(ctx context.Context, q Querier, consumer string, k MessageKey, laterID string, laterSeq uint64) error {
	_, err := q.Exec(ctx, sqlDeadLetterMarkPassed, consumer, k.Source, k.EventID, int64(k.StreamSeq), laterID, int64(laterSeq))
	return err
}

// DeadLetterListParams selects dead letters; zero fields match everything.
type DeadLetterListParams struct {
	Consumer       string
	UnresolvedOnly bool
	EventType      string
	EventID        string
	FromSeq, ToSeq uint64    // inclusive bounds on stream_seq
	Since, Until   time.Time // bounds on dead_at
	Limit          int       // 0 = no limit
}

// DeadLetterList returns the matching dead letters without bodies, in
// stream order.
func DeadLetterList(ctx context.Context, q Querier, f DeadLetterListParams) ([]DeadLetter, error) {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	limit := int64(f.Limit)
	if limit <= 0 {
		limit = -1
	}
	rows, err := q.Query(ctx, sqlDeadLetterList,
		f.Consumer, f.UnresolvedOnly, f.EventType, f.EventID, int64(f.FromSeq), int64(f.ToSeq), since, until, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDeadLetter)
}

// DeadLetterGet returns one dead letter with its body, or pgx.ErrNoRows.
func DeadLetterGet(ctx context.Context, q Querier, id int64) (DeadLetter, error) {
	rows, err := q.Query(ctx, sqlDeadLetterGet, id)
	if err != nil {
		return DeadLetter{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanDeadLetter)
}

func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	var seq, passedSeq int64
	err := row.Scan(&d.ID, &d.Consumer, &d.Source, &d.EventID, &d.EventType, &d.Subject, &seq, &d.Deliveries,
		&d.Reason, &d.LastError, &d.Body, &d.DeadAt, &d.ResolvedAt, &d.Resolution, &d.ResolutionNote,
		&d.OrderingKey, &d.PassedAt, &d.PassedByEvent, &passedSeq)
	d.StreamSeq, d.PassedBySeq = uint64(seq), uint64(passedSeq)
	if len(d.Body) == 0 {
		d.Body = nil
	}
	return d, err
}

// DeadLetterResolve marks the consumer's unresolved dead letter of the
// message k resolved; it reports whether a row changed.
func DeadLetterResolve(ctx context.Context, q Querier, consumer string, k MessageKey, resolution string) (bool, error) {
	tag, err := q.Exec(ctx, sqlDeadLetterResolve, consumer, k.Source, k.EventID, int64(k.StreamSeq), resolution)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// DeadLetterLock locks consumer's unresolved dead letter of message k for
// the rest of the transaction and reports whether there was one, and
// whether a later event of its ordering key has passed it.
func DeadLetterLock(ctx context.Context, tx Querier, consumer string, k MessageKey) (locked, passed bool, err error) {
	err = tx.QueryRow(ctx, sqlDeadLetterLock, consumer, k.Source, k.EventID, int64(k.StreamSeq)).Scan(&passed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	return err == nil, passed, err
}

// DeadLetterNoteError sets the last error of the consumer's unresolved
// dead letter of the message k.
func DeadLetterNoteError(ctx context.Context, q Querier, consumer string, k MessageKey, lastError string) error {
	_, err := q.Exec(ctx, sqlDeadLetterNoteError, consumer, k.Source, k.EventID, int64(k.StreamSeq), lastError)
	return err
}

// DeadLetterCountUnresolvedByConsumer counts the unresolved dead letters per consumer.
func DeadLetterCountUnresolvedByConsumer(ctx context.Context, q Querier) (map[string]int64, error) {
	return countsByConsumer(ctx, q, sqlDeadLetterCountUnresolvedByConsumer)
}

// MessageLock takes the transaction-scoped advisory lock of one message
// (consumer, source, event id, stream sequence), which serialises its
// failure counter's upsert with its dead letter.
func MessageLock(ctx context.Context, tx Querier, consumer, source, id string, seq uint64) error {
	_, err := tx.Exec(ctx, sqlMessageLock,
		fmt.Sprintf("hookbridge.delivery_failures/%s/%s/%s/%d", consumer, source, id, seq))
	return err
}

// MessageKey names one message of a consumer in the failure counters.
type MessageKey struct {
	Source    string
	EventID   string
	StreamSeq uint64
}

// QueueFailureClear queues the deletion of the failure counters of keys
// (one statement; a single key uses the per-message form). keys must not
// be empty.
func QueueFailureClear(b *pgx.Batch, consumer string, keys []MessageKey) {
	if len(keys) == 1 {
		b.Queue(sqlFailureClear, consumer, keys[0].Source, keys[0].EventID, int64(keys[0].StreamSeq))
		return
	}
	sources, ids, seqs := make([]string, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		sources[i], ids[i], seqs[i] = k.Source, k.EventID, int64(k.StreamSeq)
	}
	b.Queue(sqlFailureClearMany, consumer, sources, ids, seqs)
}

// FailureIncrement adds one failure to the message's counter and returns the
// new count, or pgx.ErrNoRows when the message has an inbox or dead-letter
// row (it was settled). Run it under [MessageLock].
func FailureIncrement(ctx context.Context, tx Querier, consumer string, k MessageKey, lastError string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, sqlFailureIncrement, consumer, k.Source, k.EventID, int64(k.StreamSeq), lastError).Scan(&n)
	return n, err
}

// FailurePostpone records that the message was postponed and returns when
// it was first, or pgx.ErrNoRows when the message has an inbox or
// dead-letter row (it was settled). A keyed message gives its ordering
// key, and passedBy when a later event of its key applied past it in the
// same batch (before the row existed to be marked). Run it under
// [MessageLock].
func FailurePostpone(ctx context.Context, tx Querier, consumer string, k MessageKey, orderingKey, reason string, passedBy *PassingEvent) (time.Time, error) {
	var since time.Time
	var byID *string
	var bySeq *int64
	if passedBy != nil {
		seq := int64(passedBy.StreamSeq)
		byID, bySeq = &passedBy.EventID, &seq
	}
	err := tx.QueryRow(ctx, sqlFailurePostpone, consumer, k.Source, k.EventID, int64(k.StreamSeq), reason, orderingKey, byID, bySeq).Scan(&since)
	return since, err
}

// Resolved selects rows of an operator's list by their resolution:
// "false" (unresolved), "true" (resolved) or "all".
type Resolved string

// The values of [Resolved].
const (
	Unresolved   Resolved = "false"
	OnlyResolved Resolved = "true"
	AnyResolved  Resolved = "all"
)

// DeadLetterPageParams selects one page of dead letters for an operator.
type DeadLetterPageParams struct {
	Consumer  string
	EventType string
	Resolved  Resolved // "" means Unresolved
	Before    int64    // ids below this one (0: from the newest)
	Limit     int
}

// DeadLetterPage returns one page of dead letters, newest first, without
// bodies.
func DeadLetterPage(ctx context.Context, q Querier, p DeadLetterPageParams) ([]DeadLetter, error) {
	if p.Resolved == "" {
		p.Resolved = Unresolved
	}
	rows, err := q.Query(ctx, sqlDeadLetterPage, p.Consumer, p.EventType, string(p.Resolved), p.Before, p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDeadLetter)
}

// DeadLetterDiscard marks the unresolved dead letter id "discarded" with
// the operator's note; it reports whether a row changed.
func DeadLetterDiscard(ctx context.Context, q Querier, id int64, note string) (bool, error) {
	tag, err := q.Exec(ctx, sqlDeadLetterDiscard, id, note)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// EventDeadLetter is a dead letter of one event, as an event's history
// shows it.
type EventDeadLetter struct {
	ID         int64
	Consumer   string
	StreamSeq  uint64
	ResolvedAt *time.Time
	Resolution string
}

// DeadLetterListForEvent returns the dead letters of one event for any of
// consumers.
func DeadLetterListForEvent(ctx context.Context, q Querier, consumers []string, source, eventID string) ([]EventDeadLetter, error) {
	rows, err := q.Query(ctx, sqlDeadLetterListForEvent, consumers, source, eventID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventDeadLetter, error) {
		var d EventDeadLetter
		var seq int64
		err := row.Scan(&d.ID, &d.Consumer, &seq, &d.ResolvedAt, &d.Resolution)
		d.StreamSeq = uint64(seq)
		return d, err
	})
}

// EventFailure is the failure counter of one delivery of an event that is
// failing right now.
type EventFailure struct {
	Consumer  string
	StreamSeq uint64
	Failures  int
	LastError string
	UpdatedAt time.Time // of the last failure
	// PostponedSince is when its handler first postponed it since it last
	// failed (it waits for a later event of its key), nil when its last
	// attempt failed or it was never postponed.
	PostponedSince *time.Time
}

// FailureListForEvent returns the failure counters of one event for any of
// consumers.
func FailureListForEvent(ctx context.Context, q Querier, consumers []string, source, eventID string) ([]EventFailure, error) {
	rows, err := q.Query(ctx, sqlFailureListForEvent, consumers, source, eventID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventFailure, error) {
		var f EventFailure
		var seq int64
		err := row.Scan(&f.Consumer, &seq, &f.Failures, &f.LastError, &f.UpdatedAt, &f.PostponedSince)
		f.StreamSeq = uint64(seq)
		return f, err
	})
}

// Failure is the failure counter of one message failing right now: the
// consumer retries it after its backoff, and dead-letters it when the
// count reaches max_deliver.
type Failure struct {
	Consumer  string    `json:"consumer"`
	Source    string    `json:"source"`
	EventID   string    `json:"event_id"`
	StreamSeq uint64    `json:"stream_seq"`
	Failures  int       `json:"failures"`
	LastError string    `json:"last_error"`
	UpdatedAt time.Time `json:"last_failed_at"`
	// PostponedSince is when its handler first postponed it since it last
	// failed (it waits for a later event of its key; failures do not
	// count those), nil when its last attempt failed or it was never
	// postponed.
	PostponedSince *time.Time `json:"postponed_since,omitempty"`
}

// FailureList returns up to limit messages failing right now
// (postponed false) or postponed by their handler (postponed true: their
// last attempt postponed, so PostponedSince is set, whatever failures came
// before), the most recent first.
func FailureList(ctx context.Context, q Querier, postponed bool, limit int) ([]Failure, error) {
	rows, err := q.Query(ctx, sqlFailureList, postponed, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
		var f Failure
		var seq int64
		err := row.Scan(&f.Consumer, &f.Source, &f.EventID, &seq, &f.Failures, &f.LastError, &f.UpdatedAt, &f.PostponedSince)
		f.StreamSeq = uint64(seq)
		return f, err
	})
}

// FailureCountByConsumer counts, per consumer, the messages failing right
// now and those postponed by their handler, split as [FailureList] does.
func FailureCountByConsumer(ctx context.Context, q Querier) (failing, postponed map[string]int64, err error) {
	rows, err := q.Query(ctx, sqlFailureCountByConsumer)
	if err != nil {
		return nil, nil, err
	}
	failing, postponed = map[string]int64{}, map[string]int64{}
	var name string
	var f, p int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &f, &p}, func() error {
		if f > 0 {
			failing[name] = f
		}
		if p > 0 {
			postponed[name] = p
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	return failing, postponed, nil
}

// countsByConsumer runs sql, whose rows are (consumer, count), into a map.
func countsByConsumer(ctx context.Context, q Querier, sql string) (map[string]int64, error) {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var name string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		out[name] = n
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}
