package app

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/tracing"
	"github.com/hookbridge/hookbridge/publisher"
)

// A webhook's trace:
//
//	hookbridge.receive        HTTP request at the ingress (otelhttp; a new root)
//	└ hookbridge.publish      publish to HOOKS; traceparent goes into the message headers
//	  └ hookbridge.apply      the consumer's apply transaction, parent read from the message
//	    │                     headers; its traceparent goes into the outbox rows' headers
//	    └ hookbridge.relay.publish  the relay's publish of each row to EVENTS, parent read
//	                              from the row; the event carries the same traceparent
//
// With no OTLP endpoint configured no tracer is wired: no span is
// recorded and no header is written.

// receiveHandler wraps the ingress in the receive span. Webhook senders
// are third parties: a traceparent they send is not trusted as the parent
// (it would let anyone choose trace ids and sampling), so the span starts
// a new trace and links to it (otelhttp's public endpoint mode).
func receiveHandler(tp trace.TracerProvider, h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, tracing.SpanReceive,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }),
		// Request metrics are Prometheus's job (hookbridge_ingress_*).
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(string, *http.Request) string { return tracing.SpanReceive }),
	)
}

// otelTracer records OpenTelemetry spans.
type otelTracer struct{ tracer trace.Tracer }

func (t *otelTracer) TraceReceiveStart(ctx context.Context, _ bridge.TraceReceiveStartData) context.Context {
	return ctx // the span is otelhttp's
}

// TraceReceiveEnd annotates the receive span with what the ingress did.
func (t *otelTracer) TraceReceiveEnd(ctx context.Context, d bridge.TraceReceiveEndData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	source := d.Source
	if !d.Known {
		source = "_unknown"
	}
	attrs := []attribute.KeyValue{
		attribute.String("hookbridge.source", source),
		attribute.String("hookbridge.outcome", d.Outcome),
	}
	if d.EventID != "" {
		attrs = append(attrs, attribute.String("hookbridge.event_id", d.EventID))
	}
	if d.Reason != "" {
		attrs = append(attrs, attribute.String("hookbridge.reason", d.Reason))
	}
	span.SetAttributes(attrs...)
}

func (t *otelTracer) TracePublishStart(ctx context.Context, d bridge.TracePublishStartData) context.Context {
	ctx, _ = t.tracer.Start(ctx, tracing.SpanPublish,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", d.Subject),
			attribute.String("hookbridge.source", d.Source),
			attribute.String("hookbridge.event_id", d.EventID),
		))
	if d.Header != nil {
		tracing.Inject(ctx, d.Header)
	}
	return ctx
}

func (t *otelTracer) TracePublishEnd(ctx context.Context, d bridge.TracePublishEndData) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("hookbridge.publish_result", string(d.Result)))
	if d.Err != nil {
		span.SetStatus(codes.Error, "publish failed")
	} else {
		span.SetAttributes(attribute.Int64("messaging.nats.stream_sequence", int64(d.Seq)))
	}
	span.End()
}

// maxBatchLinks caps the links of a batch's apply span (the SDK's default
// limit per span).
const maxBatchLinks = 128

// TraceApplyStart starts the apply span. One event's span is a child of
// its publish span, whose context the message carries; a batch's events
// come from as many traces, so its span is a new root linked to each
// (the first maxBatchLinks). The span's context goes to publisher.Enqueue
// through the context, so the outbox rows the handler writes carry it to
// the relay.
func (t *otelTracer) TraceApplyStart(ctx context.Context, d engine.TraceApplyStartData) context.Context {
	attrs := []attribute.KeyValue{
		attribute.String("hookbridge.consumer", d.Consumer),
		attribute.Int("messaging.batch.message_count", len(d.Events)),
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if len(d.Events) == 1 {
		ev := d.Events[0]
		ctx = tracing.Extract(ctx, ev.Header)
		attrs = append(attrs,
			attribute.String("hookbridge.source", ev.Source),
			attribute.String("hookbridge.event_id", ev.ID),
			attribute.String("hookbridge.event_type", ev.Type),
			attribute.Int64("messaging.nats.stream_sequence", int64(ev.StreamSeq)),
			attribute.Int64("hookbridge.delivery", int64(ev.NumDelivered)))
	} else {
		links := make([]trace.Link, 0, min(len(d.Events), maxBatchLinks))
		for _, ev := range d.Events {
			if len(links) == maxBatchLinks {
				break
			}
			if sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), ev.Header)); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(links...))
	}
	ctx, _ = t.tracer.Start(ctx, tracing.SpanApply, append(opts, trace.WithAttributes(attrs...))...)
	if hdr := tracing.MapHeaders(ctx); hdr != nil {
		ctx = publisher.WithHeaders(ctx, hdr)
	}
	return ctx
}

func (t *otelTracer) TraceApplyEnd(ctx context.Context, d engine.TraceApplyEndData) {
	span := trace.SpanFromContext(ctx)
	n := countOutcomes(d.Outcomes)
	for o, k := range n {
		if k > 0 {
			span.SetAttributes(attribute.Int("hookbridge.events."+consumer.Outcome(o).String(), k))
		}
	}
	if n[consumer.Failed] > 0 {
		span.SetStatus(codes.Error, "events failed")
	}
	span.End()
}

func (t *otelTracer) TraceDeadLetterStart(ctx context.Context, _ engine.TraceDeadLetterStartData) context.Context {
	return ctx
}

func (t *otelTracer) TraceDeadLetterEnd(context.Context, engine.TraceDeadLetterEndData) {}

func (t *otelTracer) TraceRelayStart(ctx context.Context, _ relay.TraceRelayStartData) context.Context {
	return ctx
}

func (t *otelTracer) TraceRelayEnd(context.Context, relay.TraceRelayEndData) {}

// relaySpanKey holds a row's relay publish span in its context.
type relaySpanKey struct{}

// TraceRelayPublishStart starts a row's relay publish span, a child of the
// apply span whose context the row carries. Rows enqueued outside a
// traced apply start no trace of their own.
func (t *otelTracer) TraceRelayPublishStart(ctx context.Context, d relay.TraceRelayPublishStartData) context.Context {
	pctx := tracing.Extract(ctx, d.Header)
	if !trace.SpanContextFromContext(pctx).IsValid() {
		return ctx
	}
	_, span := t.tracer.Start(pctx, tracing.SpanRelayPublish,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", d.Subject),
			attribute.String("hookbridge.outbox_event_id", d.EventID),
		))
	return context.WithValue(ctx, relaySpanKey{}, span)
}

func (t *otelTracer) TraceRelayPublishEnd(ctx context.Context, d relay.TraceRelayPublishEndData) {
	span, ok := ctx.Value(relaySpanKey{}).(trace.Span)
	if !ok {
		return
	}
	if d.Err != nil {
		span.SetStatus(codes.Error, errtext.Short(d.Err.Error()))
	} else {
		span.SetAttributes(attribute.Int64("messaging.nats.stream_sequence", int64(d.Seq)))
	}
	span.End()
}
