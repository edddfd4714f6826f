package relay

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// Tracer observes the relay, in the manner of pgx's tracers: each Start
// method returns the context the step goes on with, and the matching End
// method is called with that context when the step is over. Metrics and
// OpenTelemetry are two implementations; hookbridge's app package wires
// both. Methods are called on the relay's goroutine and must be quick.
type Tracer interface {
	// TraceRelayStart is called before a batch of claimed rows is
	// published.
	TraceRelayStart(ctx context.Context, data TraceRelayStartData) context.Context
	// TraceRelayEnd is called once every row of the batch was
	// acknowledged, refused or timed out, before the outcome is committed.
	TraceRelayEnd(ctx context.Context, data TraceRelayEndData)
	// TraceRelayPublishStart is called as one row is sent. ctx is the
	// batch's.
	TraceRelayPublishStart(ctx context.Context, data TraceRelayPublishStartData) context.Context
	// TraceRelayPublishEnd is called when the row's PubAck (or failure)
	// is in.
	TraceRelayPublishEnd(ctx context.Context, data TraceRelayPublishEndData)
}

// TraceRelayStartData is a batch about to be published.
type TraceRelayStartData struct {
	Rows int // rows claimed for the batch
}

// TraceRelayEndData is a published batch.
type TraceRelayEndData struct {
	Sent, Failed int
	// Duration is from the first send to the last PubAck.
	Duration time.Duration
}

// TraceRelayPublishStartData is one row as it is sent.
type TraceRelayPublishStartData struct {
	EventID string
	Subject string
	// Header is the message's header as published (the trace context a
	// handler's apply stored with the row among them); do not modify it.
	Header nats.Header
}

// TraceRelayPublishEndData is one row's PubAck or failure.
type TraceRelayPublishEndData struct {
	EventID string
	Seq     uint64 // the EVENTS sequence, when sent
	Err     error  // nil when JetStream acknowledged the message
}

// publishTraced is publish, observed by the configured tracer.
func (r *Relay) publishTraced(ctx context.Context, chains [][]*outRow) outcome {
	t := r.opts.Tracer
	if t == nil {
		return r.publish(ctx, chains)
	}
	n := 0
	for _, c := range chains {
		n += len(c)
	}
	ctx = t.TraceRelayStart(ctx, TraceRelayStartData{Rows: n})
	start := time.Now()
	out := r.publish(ctx, chains)
	t.TraceRelayEnd(ctx, TraceRelayEndData{Sent: len(out.sent), Failed: len(out.fails), Duration: time.Since(start)})
	return out
}
