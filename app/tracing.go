package app

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/internal/tracing"
	"github.com/hookbridge/hookbridge/publisher"
)

// A webhook's trace:
//
//	hookbridge.receive        HTTP request at the ingress (a new root)
//	└ hookbridge.publish      publish to HOOKS; traceparent goes into the message headers
//	  └ hookbridge.apply      the consumer's handler, parent read from the message headers;
//	    │                     its traceparent goes into the outbox rows' headers (publisher.WithHeaders)
//	    └ hookbridge.relay.publish  the relay's publish of each row to EVENTS, parent read
//	                              from the row; the event carries the same traceparent
//
// With no OTLP endpoint configured the provider is a no-op: no span is
// recorded and no header is written.

// telemetry is a server's metrics, tracer and consumer readiness.
type telemetry struct {
	metrics *metrics.Registry
	tp      *tracing.Provider
	// external: tp was given with SetTracerProvider and is not shut down
	// by the server.
	external bool
	tracer   trace.Tracer
	// migrated is set once the database roles have migrated (readiness).
	migrated atomic.Bool
}

// SetTracerProvider makes the server record spans with tp instead of the
// configured exporter (programs embedding hookbridge, tests). Call it
// before Run; tp is not shut down by the server.
func (s *Server) SetTracerProvider(tp trace.TracerProvider) {
	s.tel.tp = &tracing.Provider{TracerProvider: tp, Enabled: true}
	s.tel.external = true
}

// startTelemetry creates the metrics registry and the tracer provider; the
// returned stop flushes buffered spans.
func (s *Server) startTelemetry(ctx context.Context) (stop func(), err error) {
	s.tel.metrics = metrics.New()
	for _, cc := range s.cfg.Consumers {
		if s.roles[RoleConsumer] {
			s.tel.metrics.InitConsumer(cc.Name)
		}
	}
	if s.tel.tp == nil {
		s.tel.tp, err = tracing.Setup(ctx, tracing.Config{
			OTLPEndpoint: s.cfg.Tracing.OTLPEndpoint,
			ServiceName:  s.cfg.Tracing.ServiceName,
			SampleRatio:  s.cfg.Tracing.SampleRatio,
		})
		if err != nil {
			return nil, err
		}
		if s.tel.tp.Enabled {
			s.log.Info("tracing enabled", "otlp_endpoint", s.tel.tp.Endpoint)
		}
	}
	s.tel.tracer = tracing.Tracer(s.tel.tp)
	return func() {
		if s.tel.external {
			return
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.tel.tp.Shutdown(sctx); err != nil {
			s.log.Warn("tracing: flush on shutdown failed", "err", err)
		}
	}, nil
}

// tracingOn reports whether spans are recorded anywhere.
func (s *Server) tracingOn() bool { return s.tel.tp != nil && s.tel.tp.Enabled }

// traceReceive wraps the ingress handler in the receive span.
func (s *Server) traceReceive(h http.Handler) http.Handler {
	if !s.tracingOn() {
		return h
	}
	return tracing.HTTPHandler(s.tel.tp, tracing.SpanReceive, h)
}

// ingressJS is the JetStream context the ingress publishes with: every
// publish to HOOKS is timed for hookbridge_ingress_publish_seconds and,
// with tracing on, wrapped in a publish span whose context goes into the
// message headers.
func (s *Server) ingressJS() jetstream.JetStream {
	return &observedJetStream{JetStream: s.js, tracer: s.tel.tracer, tracing: s.tracingOn(), metrics: s.tel.metrics}
}

// observedJetStream is a jetstream.JetStream whose PublishMsg is observed;
// everything else is the wrapped context's.
type observedJetStream struct {
	jetstream.JetStream
	tracer  trace.Tracer
	tracing bool
	metrics *metrics.Registry
}

func (j *observedJetStream) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	hooks := strings.HasPrefix(msg.Subject, stream.HooksRoot+".")
	var span trace.Span
	if j.tracing {
		ctx, span = j.tracer.Start(ctx, tracing.SpanPublish,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.system", "nats"),
				attribute.String("messaging.destination.name", msg.Subject),
				attribute.String("hookbridge.source", msg.Header.Get(stream.HeaderSource)),
				attribute.String("hookbridge.event_id", msg.Header.Get(stream.HeaderEventID)),
			))
		defer span.End()
		if msg.Header == nil {
			msg.Header = nats.Header{}
		}
		tracing.Inject(ctx, msg.Header)
	}
	start := time.Now()
	ack, err := j.JetStream.PublishMsg(ctx, msg, opts...)
	result := metrics.PublishStored
	switch {
	case err != nil:
		result = metrics.PublishError
	case ack.Duplicate:
		result = metrics.PublishDuplicate
	}
	if hooks {
		j.metrics.IngressPublish(result, time.Since(start))
	}
	if span != nil {
		span.SetAttributes(attribute.String("hookbridge.publish_result", result))
		if err != nil {
			span.SetStatus(codes.Error, "publish failed")
		} else {
			span.SetAttributes(attribute.Int64("messaging.nats.stream_sequence", int64(ack.Sequence)))
		}
	}
	return ack, err
}

// traceApply wraps a consumer's handler in the apply span, a child of the
// publish span whose context the message carries. The span's context is
// handed to publisher.Enqueue through the context, so the outbox rows the
// handler writes carry it to the relay.
func (s *Server) traceApply(consumerName string, h consumer.Handler) consumer.Handler {
	if !s.tracingOn() {
		return h
	}
	return tracedHandler(s.tel.tracer, consumerName, h)
}

// tracedHandler wraps h in apply spans. A [consumer.BatchHandler] stays
// one, so the consumer keeps taking its set-wise path with tracing on
// (a plain wrapper would hide HandleBatch and turn every batch into
// per-event calls).
func tracedHandler(tracer trace.Tracer, consumerName string, h consumer.Handler) consumer.Handler {
	t := &traced{tracer: tracer, consumer: consumerName, h: h}
	if bh, ok := h.(consumer.BatchHandler); ok {
		return &tracedBatch{traced: t, bh: bh}
	}
	return t
}

// traced records one apply span per Handle call.
type traced struct {
	tracer   trace.Tracer
	consumer string
	h        consumer.Handler
}

func (t *traced) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	ctx = tracing.Extract(ctx, ev.Header)
	ctx, span := t.tracer.Start(ctx, tracing.SpanApply,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("hookbridge.consumer", t.consumer),
			attribute.String("hookbridge.source", ev.Source),
			attribute.String("hookbridge.event_id", ev.ID),
			attribute.String("hookbridge.event_type", ev.Type),
			attribute.Int64("messaging.nats.stream_sequence", int64(ev.StreamSeq)),
			attribute.Int64("hookbridge.delivery", int64(ev.NumDelivered)),
		))
	defer span.End()
	if hdr := tracing.MapHeaders(ctx); hdr != nil {
		ctx = publisher.WithHeaders(ctx, hdr)
	}
	err := t.h.Handle(ctx, tx, ev)
	if err != nil {
		span.SetStatus(codes.Error, consumer.ShortError(err.Error()))
	}
	return err
}

// maxBatchLinks caps the links of a batch's apply span (the SDK's default
// limit per span).
const maxBatchLinks = 128

// tracedBatch records one apply span per HandleBatch call. The events of a
// batch come from as many traces, so the span has no parent: it links to
// each event's publish span instead (the first maxBatchLinks), and the
// outbox rows written in the batch carry its context.
type tracedBatch struct {
	*traced
	bh consumer.BatchHandler
}

func (t *tracedBatch) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	links := make([]trace.Link, 0, min(len(evs), maxBatchLinks))
	for _, ev := range evs {
		if len(links) == maxBatchLinks {
			break
		}
		if sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), ev.Header)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, span := t.tracer.Start(ctx, tracing.SpanApply,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("hookbridge.consumer", t.consumer),
			attribute.Int("messaging.batch.message_count", len(evs)),
		))
	defer span.End()
	if hdr := tracing.MapHeaders(ctx); hdr != nil {
		ctx = publisher.WithHeaders(ctx, hdr)
	}
	err := t.bh.HandleBatch(ctx, tx, evs)
	if err != nil {
		span.SetStatus(codes.Error, consumer.ShortError(err.Error()))
	}
	return err
}

// relaySpans records one relay publish span per row that carries a trace
// context (rows enqueued outside a traced apply start no trace of their
// own). The publish is asynchronous and batched, so every span covers the
// batch's publish: from its first publish to its last PubAck.
func (s *Server) relaySpans(start time.Time, elapsed time.Duration, rows []publisher.PublishedRow) {
	if !s.tracingOn() {
		return
	}
	end := start.Add(elapsed)
	for _, row := range rows {
		ctx := tracing.ExtractMap(context.Background(), row.Header)
		if !trace.SpanContextFromContext(ctx).IsValid() {
			continue
		}
		_, span := s.tel.tracer.Start(ctx, tracing.SpanRelayPublish,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithTimestamp(start),
			trace.WithAttributes(
				attribute.String("messaging.system", "nats"),
				attribute.String("messaging.destination.name", row.Subject),
				attribute.String("hookbridge.outbox_event_id", row.EventID),
				attribute.Int("hookbridge.relay_batch_rows", len(rows)),
			))
		if row.Err != nil {
			span.SetStatus(codes.Error, consumer.ShortError(row.Err.Error()))
		}
		span.End(trace.WithTimestamp(end))
	}
}
