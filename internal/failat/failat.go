// Package failat applies a run of events with a handler and locates its
// failure. It sits below both the public handler API (whose Mux applies
// each type's run with it, and whose FailedAt reports a located failure)
// and the consumer engine (which applies a batch's new events with it and
// reads the location to decide how to split the batch), so that neither
// reaches into the other and both apply a run the same way.
package failat

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/jackc/pgx/v5"
)

// Error is a failed batch call that knows where it failed: evs[Lo:Hi]
// holds the culprit, and every event before Lo was applied without error.
// The engine uses it only to decide how to split the batch; every part is
// applied again, so a wrong hint costs time, never correctness.
type Error struct {
	Lo, Hi int
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Shift is e with its range moved by, for a run that starts at by in a
// larger batch.
func (e *Error) Shift(by int) *Error {
	return &Error{Lo: e.Lo + by, Hi: e.Hi + by, Err: e.Err}
}

// Handler is the handler API's Handler (package consumer, which imports
// this package) for events of type E: a consumer's handler and each
// type's handler in a Mux.
type Handler[E any] interface {
	Handle(ctx context.Context, tx pgx.Tx, ev E) error
}

// batchHandler is the handler API's BatchHandler for events of type E.
type batchHandler[E any] interface {
	HandleBatch(ctx context.Context, tx pgx.Tx, evs []E) error
}

// Handle applies run with h inside tx: with h's HandleBatch when it has
// one, else with Handle event by event. A batch call's failure is the
// range its own Error names, else the whole run; one event's failure is
// that event, its error labelled with name. A panic becomes an Error
// naming the run (or the event), as a returned error would.
func Handle[E any](ctx context.Context, tx pgx.Tx, h Handler[E], run []E, name func(E) string) (failed *Error) {
	i := -1 // the event being handled one by one, if any
	defer func() {
		if p := recover(); p != nil {
			failed = &Error{Lo: 0, Hi: len(run), Err: fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())}
			if i >= 0 {
				failed.Lo, failed.Hi = i, i+1
			}
		}
	}()
	if bh, ok := h.(batchHandler[E]); ok {
		if err := bh.HandleBatch(ctx, tx, run); err != nil {
			var inner *Error
			if errors.As(err, &inner) && inner.Lo >= 0 && inner.Hi <= len(run) && inner.Lo < inner.Hi {
				return &Error{Lo: inner.Lo, Hi: inner.Hi, Err: err}
			}
			return &Error{Lo: 0, Hi: len(run), Err: err}
		}
		return nil
	}
	for j, ev := range run {
		i = j
		if err := h.Handle(ctx, tx, ev); err != nil {
			return &Error{Lo: j, Hi: j + 1, Err: fmt.Errorf("%s: %w", name(ev), err)}
		}
	}
	return nil
}
