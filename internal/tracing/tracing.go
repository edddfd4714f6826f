// Package tracing sets up OpenTelemetry tracing for hookbridge and carries
// W3C trace context (the `traceparent` and `tracestate` headers) through
// NATS message headers and outbox header maps, so one trace follows a
// webhook from the HTTP request to the event the relay publishes.
//
// Nothing here touches OpenTelemetry's global state: the provider is
// passed explicitly, and propagation always uses the W3C Trace Context
// format, which needs no configuration.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of every hookbridge span.
const TracerName = "github.com/hookbridge/hookbridge"

// Span names, one per hop of a webhook's way through hookbridge.
const (
	SpanReceive      = "hookbridge.receive"       // HTTP request at the ingress
	SpanPublish      = "hookbridge.publish"       // ingress publish to HOOKS
	SpanApply        = "hookbridge.apply"         // consumer handler in the apply transaction
	SpanRelayPublish = "hookbridge.relay.publish" // relay publish of an outbox row to EVENTS
)

// Config selects the exporter.
type Config struct {
	// OTLPEndpoint is the OTLP/HTTP collector, e.g.
	// "http://otel-collector:4318". "/v1/traces" is appended unless the
	// URL already ends with it; "https" turns TLS on. Empty: tracing is
	// off and every span is a no-op.
	OTLPEndpoint string
	// ServiceName is the service.name resource attribute ("hookbridge").
	ServiceName string
	// SampleRatio is the share of new traces recorded, in (0, 1]; 0 means
	// 1. Spans with a parent follow their parent's decision.
	SampleRatio float64
}

// Provider is a configured tracer provider and how to stop it.
type Provider struct {
	trace.TracerProvider
	// Enabled reports whether spans are exported anywhere.
	Enabled bool
	// Endpoint is the URL spans are sent to ("" when disabled).
	Endpoint string
	shutdown func(context.Context) error
}

// Shutdown flushes buffered spans and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// Noop is a provider that records nothing.
func Noop() *Provider { return &Provider{TracerProvider: noop.NewTracerProvider()} }

// Setup returns the provider cfg describes: an SDK provider batching spans
// to the OTLP/HTTP endpoint, or [Noop] when no endpoint is configured.
// Creating the exporter does not connect; export failures are retried and
// dropped by the SDK, never returned to the caller's requests.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.OTLPEndpoint) == "" {
		return Noop(), nil
	}
	endpoint, err := TracesURL(cfg.OTLPEndpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "hookbridge"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	ratio := cfg.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	return &Provider{TracerProvider: tp, Enabled: true, Endpoint: endpoint, shutdown: tp.Shutdown}, nil
}

// TracesURL turns a collector address into the OTLP/HTTP traces URL:
// "collector:4318" and "http://collector:4318" become
// "http://collector:4318/v1/traces".
func TracesURL(endpoint string) (string, error) {
	endpoint = strings.TrimSpace(endpoint)
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("tracing: otlp endpoint %q: want http(s)://host:port", endpoint)
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// Tracer is hookbridge's tracer from tp (a no-op tracer when tp is nil).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// propagator is the W3C Trace Context format: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// Fields are the header names trace context travels in.
func Fields() []string { return propagator.Fields() }

// HeaderCarrier adapts nats.Header (case-sensitive, unlike http.Header)
// to a propagation.TextMapCarrier. Set writes the lower-case W3C names;
// Get also finds them written in another case by other tools.
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if v := nats.Header(c).Get(key); v != "" {
		return v
	}
	for k, vs := range c {
		if len(vs) > 0 && strings.EqualFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

// Set replaces key's values with value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Inject writes ctx's span context into h. It writes nothing when ctx has
// no valid span context (tracing off), so untraced messages stay as they
// were.
func Inject(ctx context.Context, h nats.Header) {
	if h == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote span context found in h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// MapHeaders returns ctx's trace context as a header map (for
// publisher.Message.Header and the outbox), or nil when ctx carries none.
func MapHeaders(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := map[string]string{}
	propagator.Inject(ctx, propagation.MapCarrier(m))
	if len(m) == 0 {
		return nil
	}
	return m
}

// ExtractMap returns ctx with the remote span context found in m, if any.
// Names are matched without regard to case.
func ExtractMap(ctx context.Context, m map[string]string) context.Context {
	if len(m) == 0 {
		return ctx
	}
	h := make(nats.Header, len(m))
	for k, v := range m {
		h[k] = []string{v}
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}
