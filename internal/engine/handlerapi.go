package engine

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/failat"
)

// The engine runs the handlers of the public handler API and speaks its
// vocabulary: these names are that API's own types and values, so that
// the engine's code reads as it did when both lived in one package.
type (
	Event        = consumer.Event
	Handler      = consumer.Handler
	BatchHandler = consumer.BatchHandler
	HandlerFunc  = consumer.HandlerFunc
	Mux          = consumer.Mux
	Outcome      = consumer.Outcome
	Result       = consumer.Result
)

// The outcomes of applying an event (see [consumer.Outcome]).
const (
	Failed         = consumer.Failed
	Processed      = consumer.Processed
	Duplicate      = consumer.Duplicate
	Conflict       = consumer.Conflict
	DeadLettered   = consumer.DeadLettered
	Postponed      = consumer.Postponed
	ReplayNew      = consumer.ReplayNew
	ReplayMissing  = consumer.ReplayMissing
	ReplayMismatch = consumer.ReplayMismatch
	ReplayUnusable = consumer.ReplayUnusable
	ReplayHeld     = consumer.ReplayHeld
)

// IsPermanent reports whether err was marked with [consumer.Permanent].
func IsPermanent(err error) bool { return consumer.IsPermanent(err) }

// isPostponed reports whether err postpones its event ([consumer.Postpone]).
func isPostponed(err error) bool { return consumer.IsPostponed(err) }

// handleRun applies the new events of a batch with h, locating a failure
// (or a panic) the way the handler API's Mux and FailedAt report it.
func handleRun(ctx context.Context, tx pgx.Tx, h Handler, run []Event) *failat.Error {
	var batch func([]Event) error
	if bh, ok := h.(BatchHandler); ok {
		batch = func(evs []Event) error { return bh.HandleBatch(ctx, tx, evs) }
	}
	one := func(ev Event) error { return h.Handle(ctx, tx, ev) }
	return failat.Run(run, batch, one, func(ev Event) string { return ev.Source + "/" + ev.ID })
}
