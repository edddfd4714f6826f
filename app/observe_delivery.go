package app

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/tracing"
)

// The delivery role is observed through delivery.Tracer, with the same
// two implementations as the other roles (observe.go): Prometheus
// metrics, and OpenTelemetry spans when tracing is on. An event's trace
// goes on from the relay's publish:
//
//	hookbridge.relay.publish        the relay's publish to EVENTS; the event carries its traceparent
//	└ hookbridge.delivery.attempt   each HTTP attempt to an endpoint (a client span); the
//	                                endpoint gets this span's traceparent

// spanDeliveryAttempt is the span of one attempt to an endpoint.
const spanDeliveryAttempt = "hookbridge.delivery.attempt"

var (
	_ delivery.Tracer = deliveryMetrics{}
	_ delivery.Tracer = deliveryOtel{}
	_ delivery.Tracer = deliveryTracers{}
)

// deliveryTracer is what the delivery role is observed with.
func (s *Server) deliveryTracer(m *metrics.Delivery) delivery.Tracer {
	mt := deliveryMetrics{m: m}
	if !s.tracingOn() {
		return mt
	}
	return deliveryTracers{mt, deliveryOtel{tracer: s.tel.tracer}}
}

// deliveryTracers calls each tracer in turn; each Start gets the context
// the one before returned, and each End the context the last Start
// returned.
type deliveryTracers []delivery.Tracer

func (ts deliveryTracers) TraceAttemptStart(ctx context.Context, d delivery.TraceAttemptStartData) context.Context {
	for _, t := range ts {
		ctx = t.TraceAttemptStart(ctx, d)
	}
	return ctx
}

func (ts deliveryTracers) TraceAttemptEnd(ctx context.Context, d delivery.TraceAttemptEndData) {
	for _, t := range ts {
		t.TraceAttemptEnd(ctx, d)
	}
}

func (ts deliveryTracers) TraceDeadLetter(ctx context.Context, d delivery.TraceDeadLetterData) {
	for _, t := range ts {
		t.TraceDeadLetter(ctx, d)
	}
}

func (ts deliveryTracers) TraceEndpointState(ctx context.Context, d delivery.TraceEndpointStateData) {
	for _, t := range ts {
		t.TraceEndpointState(ctx, d)
	}
}

// deliveryMetrics records the delivery's Prometheus counters; the
// backlog and state gauges are read at scrape time (deliveryState).
type deliveryMetrics struct{ m *metrics.Delivery }

func (t deliveryMetrics) TraceAttemptStart(ctx context.Context, _ delivery.TraceAttemptStartData) context.Context {
	return ctx
}

func (t deliveryMetrics) TraceAttemptEnd(_ context.Context, d delivery.TraceAttemptEndData) {
	t.m.Attempt(d.Endpoint, d.Class, d.Success, d.Duration)
}

func (t deliveryMetrics) TraceDeadLetter(_ context.Context, d delivery.TraceDeadLetterData) {
	t.m.DeadLetter(d.Endpoint)
}

func (t deliveryMetrics) TraceEndpointState(_ context.Context, d delivery.TraceEndpointStateData) {
	if d.State == delivery.StateDisabled {
		t.m.Disabled(d.Endpoint)
	}
}

// deliveryOtel records a span per attempt.
type deliveryOtel struct{ tracer trace.Tracer }

// TraceAttemptStart starts the attempt's span, a child of the span whose
// context the event carries (the relay's publish), or a new root when it
// carries none. The sender sends the span's context to the endpoint.
func (t deliveryOtel) TraceAttemptStart(ctx context.Context, d delivery.TraceAttemptStartData) context.Context {
	ctx = tracing.Extract(ctx, d.Header)
	ctx, _ = t.tracer.Start(ctx, spanDeliveryAttempt,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("hookbridge.endpoint", d.Endpoint),
			attribute.String("hookbridge.event_id", d.EventID),
			attribute.String("messaging.destination.name", d.Subject),
			attribute.Int64("messaging.nats.stream_sequence", int64(d.StreamSeq)),
			attribute.Int("hookbridge.attempt", d.Attempt),
		))
	return ctx
}

func (t deliveryOtel) TraceAttemptEnd(ctx context.Context, d delivery.TraceAttemptEndData) {
	span := trace.SpanFromContext(ctx)
	attrs := []attribute.KeyValue{attribute.String("hookbridge.delivery.class", d.Class)}
	if d.Status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", d.Status))
	}
	span.SetAttributes(attrs...)
	if !d.Success {
		span.SetStatus(codes.Error, "attempt failed: "+d.Class)
	}
	span.End()
}

func (t deliveryOtel) TraceDeadLetter(context.Context, delivery.TraceDeadLetterData) {}

func (t deliveryOtel) TraceEndpointState(context.Context, delivery.TraceEndpointStateData) {}
