package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/errtext"
)

// Reasons a message is dead-lettered.
const (
	// ReasonMaxDeliver: the last delivery allowed by max_deliver failed.
	ReasonMaxDeliver = "max_deliver"
	// ReasonPermanent: the handler returned an error marked [Permanent].
	ReasonPermanent = "permanent"
	// ReasonUnusable: the message lacks a source, event id or type.
	ReasonUnusable = "unusable"
)

// ResolutionReplayed is the resolution of a dead letter that a replay
// applied (or found already applied).
const ResolutionReplayed = "replayed"

// ErrDeadLetterNotFound is returned by [GetDeadLetter] for an unknown id.
var ErrDeadLetterNotFound = errors.New("dead letter not found")

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
	Body       []byte     `json:"-"` // filled by GetDeadLetter only; shown by `dead-letters show`
	DeadAt     time.Time  `json:"dead_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Resolution string     `json:"resolution,omitempty"`
}

// RecordDeadLetter inserts d. Recording the same message again (same
// consumer, source, event id and stream sequence) keeps one row and only
// refreshes the delivery count and error of an unresolved one. The
// message's failure counter (hookbridge.delivery_failures) is deleted in
// the same statement: it has done its job. The statement runs under the
// message's lock (see countFailure), so a failure of another delivery
// counted at the same moment is deleted too or sees the dead letter.
func RecordDeadLetter(ctx context.Context, pool *pgxpool.Pool, d DeadLetter) error {
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockMessage(ctx, tx, d.Consumer, d.Source, d.EventID, d.StreamSeq); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
		WITH counter AS (
			DELETE FROM hookbridge.delivery_failures
			WHERE consumer = $1 AND source = $2 AND event_id = $3 AND stream_seq = $6
		)
		INSERT INTO hookbridge.dead_letters
			(consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason, last_error, body)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (consumer, source, event_id, stream_seq) DO UPDATE
			SET deliveries = GREATEST(dead_letters.deliveries, EXCLUDED.deliveries),
			    last_error = EXCLUDED.last_error
			WHERE dead_letters.resolved_at IS NULL`,
			d.Consumer, d.Source, d.EventID, d.EventType, d.Subject, int64(d.StreamSeq), d.Deliveries,
			d.Reason, ShortError(d.LastError), body)
		return err
	})
	if err != nil {
		return fmt.Errorf("record dead letter %s seq %d: %w", d.Consumer, d.StreamSeq, err)
	}
	return nil
}

// DeadLetterFilter selects dead letters; zero fields match everything.
type DeadLetterFilter struct {
	Consumer       string
	UnresolvedOnly bool
	EventType      string
	EventID        string
	FromSeq, ToSeq uint64    // inclusive bounds on stream_seq
	Since, Until   time.Time // bounds on dead_at
	Limit          int       // 0 = no limit
}

// ListDeadLetters returns the matching dead letters without bodies, in
// stream order.
func ListDeadLetters(ctx context.Context, pool *pgxpool.Pool, f DeadLetterFilter) ([]DeadLetter, error) {
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
	rows, err := pool.Query(ctx, `
		SELECT id, consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason,
		       last_error, ''::bytea, dead_at, resolved_at, coalesce(resolution, '')
		FROM hookbridge.dead_letters
		WHERE ($1 = '' OR consumer = $1)
		  AND (NOT $2 OR resolved_at IS NULL)
		  AND ($3 = '' OR event_type = $3)
		  AND ($4 = '' OR event_id = $4)
		  AND ($5 = 0 OR stream_seq >= $5)
		  AND ($6 = 0 OR stream_seq <= $6)
		  AND ($7::timestamptz IS NULL OR dead_at >= $7)
		  AND ($8::timestamptz IS NULL OR dead_at < $8)
		ORDER BY stream_seq, id
		LIMIT NULLIF($9, -1)`,
		f.Consumer, f.UnresolvedOnly, f.EventType, f.EventID, int64(f.FromSeq), int64(f.ToSeq), since, until, limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// GetDeadLetter returns one dead letter with its body.
func GetDeadLetter(ctx context.Context, pool *pgxpool.Pool, id int64) (DeadLetter, error) {
	rows, err := pool.Query(ctx, `
		SELECT id, consumer, source, event_id, event_type, subject, stream_seq, deliveries, reason,
		       last_error, body, dead_at, resolved_at, coalesce(resolution, '')
		FROM hookbridge.dead_letters WHERE id = $1`, id)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ErrDeadLetterNotFound)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	return d, nil
}

func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	var seq int64
	err := row.Scan(&d.ID, &d.Consumer, &d.Source, &d.EventID, &d.EventType, &d.Subject, &seq, &d.Deliveries,
		&d.Reason, &d.LastError, &d.Body, &d.DeadAt, &d.ResolvedAt, &d.Resolution)
	d.StreamSeq = uint64(seq)
	if len(d.Body) == 0 {
		d.Body = nil
	}
	return d, err
}

// resolveDeadLetter marks the consumer's unresolved dead letter of the
// message at seq resolved; it reports whether a row changed.
func resolveDeadLetter(ctx context.Context, pool *pgxpool.Pool, consumer string, seq uint64, resolution string) (bool, error) {
	tag, err := pool.Exec(ctx, `
		UPDATE hookbridge.dead_letters SET resolved_at = now(), resolution = $3
		WHERE consumer = $1 AND stream_seq = $2 AND resolved_at IS NULL`,
		consumer, int64(seq), resolution)
	if err != nil {
		return false, fmt.Errorf("resolve dead letter %s seq %d: %w", consumer, seq, err)
	}
	return tag.RowsAffected() > 0, nil
}

// noteReplayFailure keeps the latest error of a dead letter whose replay
// failed again, so `dead-letters show` tells why.
func noteReplayFailure(ctx context.Context, pool *pgxpool.Pool, consumer string, seq uint64, err error) error {
	_, dbErr := pool.Exec(ctx, `
		UPDATE hookbridge.dead_letters SET last_error = $3
		WHERE consumer = $1 AND stream_seq = $2 AND resolved_at IS NULL`,
		consumer, int64(seq), ShortError("replay: "+err.Error()))
	if dbErr != nil {
		return fmt.Errorf("note replay failure %s seq %d: %w", consumer, seq, dbErr)
	}
	return nil
}

// ShortError makes an error text safe to store: one line, credentials in
// URLs removed, at most 500 bytes (see internal/errtext, which the relay's
// last_error uses too).
func ShortError(s string) string { return errtext.Short(s) }

// deadLetter records the message in hookbridge.dead_letters and terms it.
// When the row cannot be written the message is nak'd instead: it is
// never terminated without a row.
func (c *Consumer) deadLetter(ctx context.Context, ev Event, reason string, cause error) action {
	attrs := []any{"consumer", c.opts.Name, "source", ev.Source, "event_id", ev.ID, "type", ev.Type,
		"subject", ev.Subject, "seq", ev.StreamSeq, "delivery", ev.NumDelivered, "reason", reason,
		"err", ShortError(cause.Error())}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := RecordDeadLetter(ctx, c.pool, DeadLetter{
		Consumer:   c.opts.Name,
		Source:     ev.Source,
		EventID:    ev.ID,
		EventType:  ev.Type,
		Subject:    ev.Subject,
		StreamSeq:  ev.StreamSeq,
		Deliveries: int(ev.NumDelivered),
		Reason:     reason,
		LastError:  cause.Error(),
		Body:       ev.Body,
	})
	if err != nil {
		if IsTransient(err) {
			c.gate.close()
		}
		retry := action{kind: nak, delay: c.backoff(ev.NumDelivered)}
		c.opts.Logger.Error("dead letter not recorded; message kept for redelivery",
			append(attrs, "record_err", ShortError(err.Error()), "retry_in", retry.delay)...)
		return retry
	}
	c.opts.Logger.Error("event dead-lettered", attrs...)
	c.observeOutcome(OutcomeDeadLettered)
	return action{kind: term}
}
