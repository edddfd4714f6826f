// Package consumer is the API a team writes its webhook handlers
// against. hookbridge delivers each webhook from JetStream as an [Event]
// and applies it with exactly-once effect: in one Postgres transaction it
// first claims the event in its inbox, then calls the team's [Handler]
// with that same transaction, and acknowledges the message only after the
// commit. A redelivered event that was applied before is a Duplicate and
// does not reach the handler.
//
// A handler does all its writes through the transaction it is given
// (outgoing events too, with the publisher package's Enqueue) and returns
// an error to roll them back and have the event retried; [Permanent]
// marks an error a retry cannot fix, and [Postpone] one that a later
// event of the same ordering key fixes (the engine applies that one
// first, then this one again). [Mux] routes events to handlers by
// type, [HandlerFunc] adapts a function, and a [BatchHandler] applies many
// new events in one call, naming a failing one with [FailedAt]. [Outcome]
// names what applying an event did, in logs, metrics and the command line.
//
// Which streams, sources and consumers run, and how, is configuration
// (package app); a handler's test uses the hookbridgetest kit.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/internal/failat"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// Event is one webhook as a handler sees it.
type Event struct {
	Source string // configured source name, e.g. "demo"
	ID     string // the sender's event id (unique per source)
	Type   string // event type, e.g. "order.created"
	// Header holds the message headers (hookbridge's and any others).
	Header nats.Header
	// Body is the raw webhook body exactly as the sender signed it.
	Body []byte
	// BodySHA256 is the SHA-256 of Body.
	BodySHA256 [32]byte
	Subject    string
	// StreamSeq is the message's sequence in the HOOKS stream.
	StreamSeq uint64
	// NumDelivered counts deliveries of this message, starting at 1.
	NumDelivered uint64
	// ReceivedAt is when the ingress received the webhook.
	ReceivedAt time.Time
	// OrderingKey names the entity the event is about, when its source
	// has an ordering key (as the ingress carries it: the key itself, or
	// "sha256:" and its hash when long); "" otherwise. Events with the
	// same key are applied in the order the ingress accepted them.
	OrderingKey string
}

// Handler applies one event inside tx. It must do all its writes through
// tx (the inbox row and the effect commit together) and must not commit or
// roll back tx itself. Returning an error rolls everything back and the
// message is redelivered later; wrap it with [Permanent] when a retry
// cannot help.
type Handler interface {
	Handle(ctx context.Context, tx pgx.Tx, ev Event) error
}

// BatchHandler is a Handler that can also apply many new events at once.
type BatchHandler interface {
	Handler
	// HandleBatch applies evs (new events only, claimed in the inbox, in stream order) inside tx.
	// An error fails the whole call; the consumer then narrows down to the failing event,
	// at once when the error is a [FailedAt] naming it.
	HandleBatch(ctx context.Context, tx pgx.Tx, evs []Event) error
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, tx pgx.Tx, ev Event) error

// Handle implements [Handler].
func (f HandlerFunc) Handle(ctx context.Context, tx pgx.Tx, ev Event) error { return f(ctx, tx, ev) }

// Mux routes events to handlers by event type.
//
// Event.Type is the provider's spelling ("orders/create", "deploy:staging"),
// and the consumer receives every spelling that maps to the subject of a
// type it subscribes to (a type's subject form reads '/' as the token
// separator '.' and escapes other punctuation). So an event whose
// type has no handler of its own goes to the handler registered for a
// type with the same subject form: a handler registered for
// "orders.create" also gets Shopify's "orders/create".
type Mux struct {
	handlers map[string]Handler
	// bySubject maps each registered type's subject form to its handler
	// and type, for spellings that differ from the registered one.
	bySubject map[string]subjectHandler
}

type subjectHandler struct {
	eventType string
	h         Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux {
	return &Mux{handlers: map[string]Handler{}, bySubject: map[string]subjectHandler{}}
}

// Register registers h for eventType. Registering a type twice panics, and
// so does registering two types with the same subject form
// ("orders.create" and "orders/create"): the stream cannot tell their
// events apart by subject, so which handler gets a third spelling would be
// ambiguous. Both are programming errors caught at start-up, never caused
// by input; register one of the spellings.
func (m *Mux) Register(eventType string, h Handler) {
	if _, dup := m.handlers[eventType]; dup {
		panic(fmt.Sprintf("consumer: handler for %q registered twice", eventType))
	}
	subj := stream.TypeSubject(eventType)
	if other, dup := m.bySubject[subj]; dup {
		panic(fmt.Sprintf("consumer: handlers for %q and %q: both types map to the subject tokens %q", other.eventType, eventType, subj))
	}
	m.handlers[eventType] = h
	m.bySubject[subj] = subjectHandler{eventType: eventType, h: h}
}

// handler returns the handler for eventType: the one registered for it,
// else the one registered for a type with its subject form.
func (m *Mux) handler(eventType string) (Handler, bool) {
	if h, ok := m.handlers[eventType]; ok {
		return h, true
	}
	sh, ok := m.bySubject[stream.TypeSubject(eventType)]
	return sh.h, ok
}

// RegisterFunc registers f for eventType.
func (m *Mux) RegisterFunc(eventType string, f func(ctx context.Context, tx pgx.Tx, ev Event) error) {
	m.Register(eventType, HandlerFunc(f))
}

// EventTypes lists the registered event types, sorted.
func (m *Mux) EventTypes() []string {
	out := make([]string, 0, len(m.handlers))
	for t := range m.handlers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Handle implements [Handler]. An event type with no handler is a
// permanent error: redelivering it cannot help.
func (m *Mux) Handle(ctx context.Context, tx pgx.Tx, ev Event) error {
	h, ok := m.handler(ev.Type)
	if !ok {
		return Permanent(fmt.Errorf("no handler for event type %q", ev.Type))
	}
	return h.Handle(ctx, tx, ev)
}

// HandleBatch implements [BatchHandler]. It splits evs into maximal runs
// of consecutive events of one type and applies the runs in stream order,
// each with its type's HandleBatch when that handler is a [BatchHandler],
// else with Handle event by event. So events of one entity apply in
// stream order even when their types differ (order.created, then
// order.paid of the same order, ends paid). The error names the run or
// event that failed, which lets the consumer narrow down to it without
// trying every half of the batch.
//
// The outgoing events the runs enqueue are gathered and written once all
// runs are done ([publisher.Deferred]): a batch's events then go into one
// outbox pack instead of one per run, which with several event types
// interleaved costs most of the outbox's WAL.
func (m *Mux) HandleBatch(ctx context.Context, tx pgx.Tx, evs []Event) error {
	ctx, flush := publisher.Deferred(ctx)
	if err := m.handleRuns(ctx, tx, evs); err != nil {
		return err
	}
	return flush(ctx, tx)
}

func (m *Mux) handleRuns(ctx context.Context, tx pgx.Tx, evs []Event) error {
	for lo := 0; lo < len(evs); {
		hi := lo + 1
		for hi < len(evs) && evs[hi].Type == evs[lo].Type {
			hi++
		}
		h, ok := m.handler(evs[lo].Type)
		if !ok {
			return &failat.Error{Lo: lo, Hi: lo + 1, Err: Permanent(fmt.Errorf("no handler for event type %q", evs[lo].Type))}
		}
		if err := failat.Handle(ctx, tx, h, evs[lo:hi], eventName); err != nil {
			return err.Shift(lo)
		}
		lo = hi
	}
	return nil
}

// eventName labels an event in the error of a run applied one event at a
// time.
func eventName(ev Event) string { return ev.Source + "/" + ev.ID }

// FailedAt is what a [BatchHandler]'s HandleBatch returns when it knows
// which event failed: evs[i] is the culprit and every event before it was
// applied without error. The consumer then applies the events around it
// without trying every half of the batch, and evs[i] alone, where the
// handler's Handle decides its fate (err's [Permanent] mark is kept). A
// wrong index costs time, never correctness. FailedAt(i, nil) is nil.
func FailedAt(i int, err error) error {
	if err == nil {
		return nil
	}
	return &failat.Error{Lo: i, Hi: i + 1, Err: err}
}

// permanentError marks an error that retrying will not fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the message is not
// redelivered. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
