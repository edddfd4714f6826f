// Package failat locates the failure of a handler run over a batch of
// events. It sits below both the public handler API (whose FailedAt and
// Mux produce located failures) and the consumer engine (which reads them
// to decide how to split a batch), so that neither reaches into the other.
package failat

import (
	"errors"
	"fmt"
	"runtime/debug"
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

// Run applies run: with batch when it is not nil (a batch handler), else
// with one event by event. A panic becomes an Error naming the run (or
// the event), as a returned error would; name labels an event in the
// error of the one-by-one path.
func Run[E any](run []E, batch func([]E) error, one func(E) error, name func(E) string) (failed *Error) {
	i := -1 // the event being handled one by one, if any
	defer func() {
		if p := recover(); p != nil {
			failed = &Error{Lo: 0, Hi: len(run), Err: fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())}
			if i >= 0 {
				failed.Lo, failed.Hi = i, i+1
			}
		}
	}()
	if batch != nil {
		if err := batch(run); err != nil {
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
		if err := one(ev); err != nil {
			return &Error{Lo: j, Hi: j + 1, Err: fmt.Errorf("%s: %w", name(ev), err)}
		}
	}
	return nil
}
