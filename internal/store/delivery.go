package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sqlDeliveryAttemptInsert         = load("delivery_attempt_insert.sql")
	sqlDeliveryAttemptsInsert        = load("delivery_attempts_insert.sql")
	sqlDeliveryAttemptListForEvent   = load("delivery_attempt_list_for_event.sql")
	sqlDeliveryAttemptListRecent     = load("delivery_attempt_list_recent.sql")
	sqlDeliveryDeadLetterInsert      = load("delivery_dead_letter_insert.sql")
	sqlDeliveryDeadLetterFind        = load("delivery_dead_letter_find.sql")
	sqlDeliveryDeadLetterBody        = load("delivery_dead_letter_body.sql")
	sqlDeliveryDeadLetterRequeue     = load("delivery_dead_letter_requeue.sql")
	sqlDeliveryDeadLetterDiscard     = load("delivery_dead_letter_discard.sql")
	sqlDeliveryDeadLetterPass        = load("delivery_dead_letter_pass.sql")
	sqlDeliveryDeadLetterKeys        = load("delivery_dead_letter_keys.sql")
	sqlDeliveryDeadLetterCount       = load("delivery_dead_letter_count.sql")
	sqlDeliveryDeadLetterRedelivered = load("delivery_dead_letter_redelivered.sql")
	sqlDeliveryDeadLetterExists      = load("delivery_dead_letter_exists.sql")
)

// DeliveryAttempt is one row of hookbridge.delivery_attempts: one HTTP
// attempt of an event to an endpoint.
type DeliveryAttempt struct {
	Endpoint  string `json:"endpoint"`
	EventID   string `json:"event_id"`
	Subject   string `json:"subject"`
	StreamSeq uint64 `json:"stream_seq"`
	Attempt   int    `json:"attempt"`
	// StatusCode is the HTTP status, 0 when there was no answer.
	StatusCode int `json:"status_code,omitempty"`
	// ErrorClass is a short word for a failure ("" on success).
	ErrorClass string `json:"error_class,omitempty"`
	// Excerpt is the start of the response body, at most 4 KiB.
	Excerpt     string        `json:"response_excerpt,omitempty"`
	Duration    time.Duration `json:"duration"`
	AttemptedAt time.Time     `json:"attempted_at"`
}

// DeliveryAttemptInsert records a.
func DeliveryAttemptInsert(ctx context.Context, q Querier, a DeliveryAttempt) error {
	_, err := q.Exec(ctx, sqlDeliveryAttemptInsert, a.Endpoint, a.EventID, a.Subject, int64(a.StreamSeq),
		a.Attempt, a.StatusCode, a.ErrorClass, a.Excerpt, a.Duration.Milliseconds())
	return err
}

// DeliveryAttemptsInsert records the attempts in one statement.
func DeliveryAttemptsInsert(ctx context.Context, q Querier, attempts []DeliveryAttempt) error {
	n := len(attempts)
	endpoints, ids, subjects, excerpts, classes := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	seqs := make([]int64, n)
	nums, codes, ms := make([]int32, n), make([]int32, n), make([]int32, n)
	for i, a := range attempts {
		endpoints[i], ids[i], subjects[i], seqs[i] = a.Endpoint, a.EventID, a.Subject, int64(a.StreamSeq)
		nums[i], codes[i], classes[i], excerpts[i] = int32(a.Attempt), int32(a.StatusCode), a.ErrorClass, a.Excerpt
		ms[i] = int32(min(a.Duration.Milliseconds(), math.MaxInt32))
	}
	_, err := q.Exec(ctx, sqlDeliveryAttemptsInsert, endpoints, ids, subjects, seqs, nums, codes, classes, excerpts, ms)
	return err
}

// DeliveryAttemptListForEvent returns the attempts of event id on
// endpoint ("": on every endpoint), by endpoint, oldest first.
func DeliveryAttemptListForEvent(ctx context.Context, q Querier, endpoint, eventID string) ([]DeliveryAttempt, error) {
	rows, err := q.Query(ctx, sqlDeliveryAttemptListForEvent, endpoint, eventID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDeliveryAttempt)
}

// DeliveryAttemptListRecent returns endpoint's latest limit attempts,
// newest first.
func DeliveryAttemptListRecent(ctx context.Context, q Querier, endpoint string, limit int) ([]DeliveryAttempt, error) {
	rows, err := q.Query(ctx, sqlDeliveryAttemptListRecent, endpoint, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDeliveryAttempt)
}

func scanDeliveryAttempt(r pgx.CollectableRow) (DeliveryAttempt, error) {
	var a DeliveryAttempt
	var seq int64
	var ms int
	err := r.Scan(&a.Endpoint, &a.EventID, &a.Subject, &seq, &a.Attempt, &a.StatusCode, &a.ErrorClass,
		&a.Excerpt, &ms, &a.AttemptedAt)
	a.StreamSeq = uint64(seq)
	a.Duration = time.Duration(ms) * time.Millisecond
	return a, err
}

// DeliveryDeadLetter is one row of hookbridge.delivery_dead_letters: a
// delivery that failed its endpoint's whole schedule.
type DeliveryDeadLetter struct {
	ID        int64  `json:"id"`
	Endpoint  string `json:"endpoint"`
	EventID   string `json:"event_id"`
	Subject   string `json:"subject"`
	StreamSeq uint64 `json:"stream_seq"`
	Attempts  int    `json:"attempts"`
	// LastStatus is the last attempt's HTTP status, 0 when it had none.
	LastStatus     int    `json:"last_status,omitempty"`
	LastErrorClass string `json:"last_error_class,omitempty"`
	LastExcerpt    string `json:"last_excerpt,omitempty"`
	// Payload and Headers are what a requeue sends (written with the row,
	// not read by [DeliveryDeadLetterFind]: see [DeliveryDeadLetterBody]).
	Payload []byte            `json:"-"`
	Headers map[string]string `json:"-"`
	// HasPayload says whether the row keeps the body (rows written before
	// bodies were kept do not; their requeue reads EVENTS).
	HasPayload bool `json:"has_payload"`
	// OrderingKey is the key on an ordered endpoint, "" otherwise.
	OrderingKey string    `json:"ordering_key,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	// ResolvedAt and Resolution ("requeued", "discarded") are set once
	// an operator acted on it.
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Resolution string     `json:"resolution,omitempty"`
	// PassedAt is when a later event of its key was first sent (ordered
	// endpoints): a requeue then needs the out-of-order flag.
	PassedAt *time.Time `json:"passed_at,omitempty"`
	// Requeues counts the requeues; RedeliveredAt is when the last one's
	// delivery succeeded.
	Requeues      int        `json:"requeues,omitempty"`
	RedeliveredAt *time.Time `json:"redelivered_at,omitempty"`
}

// QueueDeliveryDeadLetterInsert adds the insert of d to b (a dead
// letter is written in the transaction that ends its pending delivery).
// The same (endpoint, stream sequence) again reopens and refreshes the
// row.
func QueueDeliveryDeadLetterInsert(b *pgx.Batch, d DeliveryDeadLetter) {
	var headers []byte
	if len(d.Headers) > 0 {
		headers, _ = json.Marshal(d.Headers) // a map of strings: never fails
	}
	b.Queue(sqlDeliveryDeadLetterInsert, d.Endpoint, d.EventID, d.Subject, int64(d.StreamSeq),
		d.Attempts, d.LastStatus, d.LastErrorClass, d.LastExcerpt, d.Payload, headers, d.OrderingKey)
}

// DeliveryDeadLetterFilter selects dead letters; zero fields select any.
type DeliveryDeadLetterFilter struct {
	IDs      []int64
	Endpoint string
	EventID  string
	Subject  string
	// Since and Until bound when the rows were written ([Since, Until)).
	Since, Until time.Time
	// Resolved includes requeued and discarded rows.
	Resolved bool
	// Limit bounds the rows (0: 1000).
	Limit int
}

// DeliveryDeadLetterFind returns the dead letters f selects, oldest
// first, without their bodies.
func DeliveryDeadLetterFind(ctx context.Context, q Querier, f DeliveryDeadLetterFilter) ([]DeliveryDeadLetter, error) {
	var ids []int64
	if f.IDs != nil {
		ids = f.IDs
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	rows, err := q.Query(ctx, sqlDeliveryDeadLetterFind, ids, f.Endpoint, f.EventID, f.Subject,
		optionalTime(f.Since), optionalTime(f.Until), f.Resolved, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryDeadLetter, error) {
		var d DeliveryDeadLetter
		var seq int64
		err := r.Scan(&d.ID, &d.Endpoint, &d.EventID, &d.Subject, &seq, &d.Attempts, &d.LastStatus,
			&d.LastErrorClass, &d.LastExcerpt, &d.OrderingKey, &d.CreatedAt, &d.ResolvedAt, &d.Resolution,
			&d.PassedAt, &d.Requeues, &d.RedeliveredAt, &d.HasPayload)
		d.StreamSeq = uint64(seq)
		return d, err
	})
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// DeliveryDeadLetterBody returns what a requeue of dead letter id sends:
// its body (nil when the row keeps none) and headers. ok is false when
// there is no such row.
func DeliveryDeadLetterBody(ctx context.Context, q Querier, id int64) (payload []byte, headers map[string]string, ok bool, err error) {
	var raw []byte
	err = q.QueryRow(ctx, sqlDeliveryDeadLetterBody, id).Scan(&payload, &raw)
	if err == pgx.ErrNoRows {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &headers); err != nil {
			return nil, nil, false, fmt.Errorf("dead letter %d headers: %w", id, err)
		}
	}
	return payload, headers, true, nil
}

// DeliveryDeadLetterRequeue requeues the unresolved dead letters ids
// (those passed by a later event of their key only when outOfOrder) and
// returns the ids it requeued: each once, however many requeues race.
func DeliveryDeadLetterRequeue(ctx context.Context, q Querier, ids []int64, outOfOrder bool) ([]int64, error) {
	rows, err := q.Query(ctx, sqlDeliveryDeadLetterRequeue, ids, outOfOrder)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// DeliveryDeadLetterDiscard discards the unresolved dead letters ids and
// returns those it discarded.
func DeliveryDeadLetterDiscard(ctx context.Context, q Querier, ids []int64) ([]int64, error) {
	rows, err := q.Query(ctx, sqlDeliveryDeadLetterDiscard, ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// DeliveryDeadLetterPass marks the dead letters of key on endpoint
// before seq passed, as the event at seq is about to be sent, and reports
// whether one of them is requeued and not delivered yet (the event must
// then wait behind it), and whether the key keeps an unpassed dead letter
// at or after seq (a replayed event can come before its key's dead
// letter: a later event still has to pass it).
func DeliveryDeadLetterPass(ctx context.Context, q Querier, endpoint, key string, seq uint64) (requeuePending, more bool, err error) {
	err = q.QueryRow(ctx, sqlDeliveryDeadLetterPass, endpoint, key, int64(seq)).Scan(&requeuePending, &more)
	return requeuePending, more, err
}

// DeliveryDeadLetterKeys returns the keys of endpoint with a dead letter
// no later event of the key has passed.
func DeliveryDeadLetterKeys(ctx context.Context, q Querier, endpoint string) ([]string, error) {
	rows, err := q.Query(ctx, sqlDeliveryDeadLetterKeys, endpoint)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// QueueDeliveryDeadLetterRedelivered adds to b the record that a requeue
// of dead letter id was delivered (in the transaction that ends its
// pending delivery).
func QueueDeliveryDeadLetterRedelivered(b *pgx.Batch, id int64) {
	b.Queue(sqlDeliveryDeadLetterRedelivered, id)
}

// DeliveryDeadLetterCounts is an endpoint's unresolved dead letters.
type DeliveryDeadLetterCounts struct {
	Endpoint string
	Count    int
	Oldest   time.Time
}

// DeliveryDeadLetterCount returns the unresolved dead letters per
// endpoint (endpoints without any are absent).
func DeliveryDeadLetterCount(ctx context.Context, q Querier) ([]DeliveryDeadLetterCounts, error) {
	rows, err := q.Query(ctx, sqlDeliveryDeadLetterCount)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryDeadLetterCounts, error) {
		var c DeliveryDeadLetterCounts
		err := r.Scan(&c.Endpoint, &c.Count, &c.Oldest)
		return c, err
	})
}

// DeliveryDeadLetterExists reports whether endpoint has a dead letter of
// event eventID at stream sequence seq, resolved or not: the live
// delivery of that message ended there.
func DeliveryDeadLetterExists(ctx context.Context, q Querier, endpoint string, seq uint64, eventID string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, sqlDeliveryDeadLetterExists, endpoint, int64(seq), eventID).Scan(&ok)
	return ok, err
}
