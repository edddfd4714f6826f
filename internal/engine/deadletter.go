package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
)

// Reasons a message is dead-lettered.
const (
	// ReasonMaxDeliver: the last delivery allowed by max_deliver failed.
	ReasonMaxDeliver = "max_deliver"
	// ReasonPermanent: the handler returned an error marked [consumer.Permanent].
	ReasonPermanent = "permanent"
	// ReasonUnusable: the message lacks a source, event id or type.
	ReasonUnusable = "unusable"
	// ReasonPostponed: the handler postponed the event for longer than
	// the consumer's postpone_limit ([consumer.Postpone]).
	ReasonPostponed = "postponed"
	// ReasonTypeDropped: the event's type is no longer one of the
	// consumer's (its configuration dropped it after the event was
	// accepted: for a consumer declared in SQL, the type's apply
	// statement was removed) and its handler failed it permanently, as
	// a handler without code for the type does. Restoring the type and
	// requeueing the dead letter applies it.
	ReasonTypeDropped = "type_dropped"
)

// ResolutionReplayed is the resolution of a dead letter that a replay
// applied (or found already applied).
const ResolutionReplayed = "replayed"

// ResolutionRequeued is the resolution of a dead letter an operator
// requeued one by one (the admin API, `dead-letters requeue`) and that
// then applied.
const ResolutionRequeued = "requeued"

// ResolutionDiscarded is the resolution of a dead letter an operator
// discarded: it is kept and marked, and a requeue no longer applies it.
// A range replay that covers its message re-delivers it like any other
// message in the range.
const ResolutionDiscarded = "discarded"

// DeadLetter is one row of the dead letters (the store's row type).
type DeadLetter = store.DeadLetter

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
		rec := d
		rec.Body = body
		rec.LastError = ShortError(d.LastError)
		err := store.DeadLetterInsert(ctx, tx, rec)
		return err
	})
	if err != nil {
		return fmt.Errorf("record dead letter %s seq %d: %w", d.Consumer, d.StreamSeq, err)
	}
	return nil
}

// DeadLetterFilter selects dead letters; zero fields match everything.
type DeadLetterFilter = store.DeadLetterListParams

// ListDeadLetters returns the matching dead letters without bodies, in
// stream order.
func ListDeadLetters(ctx context.Context, pool *pgxpool.Pool, f DeadLetterFilter) ([]DeadLetter, error) {
	out, err := store.DeadLetterList(ctx, pool, f)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// noteReplayFailure keeps the latest error of a dead letter whose replay
// failed again, so `dead-letters show` tells why.
func noteReplayFailure(ctx context.Context, pool *pgxpool.Pool, consumerName string, ev consumer.Event, err error) error {
	dbErr := store.DeadLetterNoteError(ctx, pool, consumerName, messageKey(&ev), ShortError("replay: "+err.Error()))
	if dbErr != nil {
		return fmt.Errorf("note replay failure %s seq %d: %w", consumerName, ev.StreamSeq, dbErr)
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
func (c *Consumer) deadLetter(ctx context.Context, ev consumer.Event, reason string, cause error) action {
	attrs := []any{"consumer", c.opts.Name, "source", ev.Source, "event_id", ev.ID, "type", ev.Type,
		"subject", ev.Subject, "seq", ev.StreamSeq, "delivery", ev.NumDelivered, "reason", reason,
		"err", errtext.ForLog(cause)}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if t := c.opts.Tracer; t != nil {
		ctx = t.TraceDeadLetterStart(ctx, TraceDeadLetterStartData{Consumer: c.opts.Name, Event: ev, Reason: reason})
	}
	err := RecordDeadLetter(ctx, c.pool, DeadLetter{
		Consumer:    c.opts.Name,
		Source:      ev.Source,
		EventID:     ev.ID,
		EventType:   ev.Type,
		Subject:     ev.Subject,
		StreamSeq:   ev.StreamSeq,
		Deliveries:  int(ev.NumDelivered),
		Reason:      reason,
		LastError:   cause.Error(),
		Body:        ev.Body,
		OrderingKey: ev.OrderingKey,
	})
	if t := c.opts.Tracer; t != nil {
		t.TraceDeadLetterEnd(ctx, TraceDeadLetterEndData{Consumer: c.opts.Name, Err: err})
	}
	if err != nil {
		if IsTransient(err) {
			c.gate.close()
		}
		retry := action{kind: nak, delay: c.backoff(ev.NumDelivered)}
		c.opts.Logger.Error("dead letter not recorded; message kept for redelivery",
			append(attrs, "record_err", errtext.ForLog(err), "retry_in", retry.delay)...)
		return retry
	}
	c.opts.Logger.Error("event dead-lettered", attrs...)
	return action{kind: term}
}
