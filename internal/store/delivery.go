package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sqlDeliveryAttemptInsert       = load("delivery_attempt_insert.sql")
	sqlDeliveryAttemptListForEvent = load("delivery_attempt_list_for_event.sql")
	sqlDeliveryDeadLetterInsert    = load("delivery_dead_letter_insert.sql")
	sqlDeliveryDeadLetterList      = load("delivery_dead_letter_list.sql")
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

// DeliveryAttemptListForEvent returns the attempts of event id on
// endpoint, oldest first.
func DeliveryAttemptListForEvent(ctx context.Context, q Querier, endpoint, eventID string) ([]DeliveryAttempt, error) {
	rows, err := q.Query(ctx, sqlDeliveryAttemptListForEvent, endpoint, eventID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryAttempt, error) {
		var a DeliveryAttempt
		var seq int64
		var ms int
		err := r.Scan(&a.Endpoint, &a.EventID, &a.Subject, &seq, &a.Attempt, &a.StatusCode, &a.ErrorClass,
			&a.Excerpt, &ms, &a.AttemptedAt)
		a.StreamSeq = uint64(seq)
		a.Duration = time.Duration(ms) * time.Millisecond
		return a, err
	})
}

// DeliveryDeadLetter is one row of hookbridge.delivery_dead_letters.
type DeliveryDeadLetter struct {
	ID        int64  `json:"id"`
	Endpoint  string `json:"endpoint"`
	EventID   string `json:"event_id"`
	Subject   string `json:"subject"`
	StreamSeq uint64 `json:"stream_seq"`
	Attempts  int    `json:"attempts"`
	// LastStatus is the last attempt's HTTP status, 0 when it had none.
	LastStatus     int       `json:"last_status,omitempty"`
	LastErrorClass string    `json:"last_error_class,omitempty"`
	LastExcerpt    string    `json:"last_excerpt,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// DeliveryDeadLetterInsert records d; the same (endpoint, stream seq)
// again refreshes an unresolved row.
func DeliveryDeadLetterInsert(ctx context.Context, q Querier, d DeliveryDeadLetter) error {
	_, err := q.Exec(ctx, sqlDeliveryDeadLetterInsert, d.Endpoint, d.EventID, d.Subject, int64(d.StreamSeq),
		d.Attempts, d.LastStatus, d.LastErrorClass, d.LastExcerpt)
	return err
}

// DeliveryDeadLetterList returns up to limit unresolved dead letters of
// endpoint, oldest first.
func DeliveryDeadLetterList(ctx context.Context, q Querier, endpoint string, limit int) ([]DeliveryDeadLetter, error) {
	rows, err := q.Query(ctx, sqlDeliveryDeadLetterList, endpoint, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryDeadLetter, error) {
		var d DeliveryDeadLetter
		var seq int64
		err := r.Scan(&d.ID, &d.Endpoint, &d.EventID, &d.Subject, &seq, &d.Attempts, &d.LastStatus,
			&d.LastErrorClass, &d.LastExcerpt, &d.CreatedAt)
		d.StreamSeq = uint64(seq)
		return d, err
	})
}

// QueueDeliveryAttemptInsert adds the insert of a to b, for recording
// many attempts in one transaction.
func QueueDeliveryAttemptInsert(b *pgx.Batch, a DeliveryAttempt) {
	b.Queue(sqlDeliveryAttemptInsert, a.Endpoint, a.EventID, a.Subject, int64(a.StreamSeq),
		a.Attempt, a.StatusCode, a.ErrorClass, a.Excerpt, a.Duration.Milliseconds())
}
