package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func recorder() (*tracetest.SpanRecorder, trace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	return rec, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
}

func TestHeaderCarrierRoundTrip(t *testing.T) {
	t.Parallel()
	_, tp := recorder()
	ctx, span := Tracer(tp).Start(context.Background(), "x")
	defer span.End()
	h := nats.Header{}
	Inject(ctx, h)
	if h.Get("traceparent") == "" {
		t.Fatalf("no traceparent written: %v", h)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, want the span's context as remote", got)
	}
	// Other tools may write the header in another case.
	other := nats.Header{"Traceparent": h["traceparent"]}
	if got := trace.SpanContextFromContext(Extract(context.Background(), other)); got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("case-insensitive extract = %v", got)
	}
	// The map form (outbox headers) carries the same context.
	m := MapHeaders(ctx)
	if got := trace.SpanContextFromContext(ExtractMap(context.Background(), m)); got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("map round trip = %v (%v)", got, m)
	}
}

func TestNothingIsWrittenWithoutASpan(t *testing.T) {
	t.Parallel()
	h := nats.Header{}
	Inject(context.Background(), h)
	if len(h) != 0 {
		t.Fatalf("headers written without a span: %v", h)
	}
	if m := MapHeaders(context.Background()); m != nil {
		t.Fatalf("map headers without a span: %v", m)
	}
	// The no-op provider starts spans with no valid context: still nothing.
	ctx, span := Tracer(Noop()).Start(context.Background(), "x")
	defer span.End()
	Inject(ctx, h)
	if len(h) != 0 {
		t.Fatalf("no-op tracer wrote headers: %v", h)
	}
}

func TestSetup(t *testing.T) {
	t.Parallel()
	p, err := Setup(context.Background(), Config{})
	if err != nil || p.Enabled {
		t.Fatalf("no endpoint: %+v, %v; want a disabled provider", p, err)
	}
	p, err = Setup(context.Background(), Config{OTLPEndpoint: "127.0.0.1:1"})
	if err != nil || !p.Enabled || p.Endpoint != "http://127.0.0.1:1/v1/traces" {
		t.Fatalf("endpoint: %+v, %v", p, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing listens there: do not wait for the export
	_ = p.Shutdown(ctx)
	if _, err := Setup(context.Background(), Config{OTLPEndpoint: "ftp://x"}); err == nil {
		t.Fatal("ftp endpoint accepted")
	}
}

func TestTracesURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"collector:4318":                        "http://collector:4318/v1/traces",
		"http://collector:4318":                 "http://collector:4318/v1/traces",
		"https://collector:4318/":               "https://collector:4318/v1/traces",
		"https://gw.example/otlp":               "https://gw.example/otlp/v1/traces",
		"http://collector:4318/v1/traces":       "http://collector:4318/v1/traces",
		" http://collector:4318/otlp/v1/traces": "http://collector:4318/otlp/v1/traces",
	} {
		if got, err := TracesURL(in); err != nil || got != want {
			t.Errorf("TracesURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
