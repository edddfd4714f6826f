package engine

import (
	"context"
	"time"

	"github.com/hookbridge/hookbridge/consumer"
)

// Tracer observes a consumer, in the manner of pgx's tracers: each Start
// method returns the context the step goes on with, and the matching End
// method is called with that context when the step is over. Metrics and
// OpenTelemetry are two implementations; hookbridge's app package wires
// both. Methods are called from the apply workers: they must be quick and
// safe for concurrent use.
//
// The context TraceApplyStart returns is the one the handler runs with,
// so a tracer can hand it values (hookbridge's puts the apply's trace
// context there for publisher.Enqueue to store with each outbox row).
type Tracer interface {
	// TraceApplyStart is called before the transactions that apply one
	// fetched batch of usable events (claims, handler, commit, and the
	// narrowing down after a failure).
	TraceApplyStart(ctx context.Context, data TraceApplyStartData) context.Context
	// TraceApplyEnd is called with each event's outcome.
	TraceApplyEnd(ctx context.Context, data TraceApplyEndData)
	// TraceDeadLetterStart is called before a message is recorded in
	// hookbridge.dead_letters.
	TraceDeadLetterStart(ctx context.Context, data TraceDeadLetterStartData) context.Context
	// TraceDeadLetterEnd is called once it was recorded (and is then
	// terminated) or could not be (and is redelivered).
	TraceDeadLetterEnd(ctx context.Context, data TraceDeadLetterEndData)
}

// TraceApplyStartData is a batch about to be applied.
type TraceApplyStartData struct {
	Consumer string
	// Events are the batch's events in the order it tries them: stream
	// order, except that a keyed event its handler postponed may come
	// right after a later event of its key, which it may be waiting for
	// (keyed.go, take). Do not modify them.
	Events []consumer.Event
}

// TraceApplyEndData is an applied batch.
type TraceApplyEndData struct {
	Consumer string
	// Outcomes holds each event's outcome, in the order of the start's
	// Events: [consumer.Processed], [consumer.Duplicate],
	// [consumer.Conflict], [consumer.Postponed] or [consumer.Failed].
	Outcomes []consumer.Outcome
	// Duration is the time taken by every transaction of the batch.
	Duration time.Duration
}

// TraceDeadLetterStartData is a message about to be dead-lettered.
type TraceDeadLetterStartData struct {
	Consumer string
	Event    consumer.Event
	// Reason is one of the Reason* constants.
	Reason string
}

// TraceDeadLetterEndData is the end of a dead-lettering.
type TraceDeadLetterEndData struct {
	Consumer string
	// Err is why the row could not be written; the message is then
	// redelivered instead of terminated.
	Err error
}

func (c *Consumer) traceApplyStart(ctx context.Context, evs []consumer.Event) context.Context {
	if c.opts.Tracer == nil {
		return ctx
	}
	return c.opts.Tracer.TraceApplyStart(ctx, TraceApplyStartData{Consumer: c.opts.Name, Events: evs})
}

func (c *Consumer) traceApplyEnd(ctx context.Context, results []consumer.Result, elapsed time.Duration) {
	if c.opts.Tracer == nil {
		return
	}
	outs := make([]consumer.Outcome, len(results))
	for i, r := range results {
		outs[i] = r.Outcome
		if r.Outcome == consumer.Failed && consumer.IsPostponed(r.Err) {
			outs[i] = consumer.Postponed
		}
	}
	c.opts.Tracer.TraceApplyEnd(ctx, TraceApplyEndData{Consumer: c.opts.Name, Outcomes: outs, Duration: elapsed})
}
