package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// HTTPHandler wraps next in a server span named name (a [SpanReceive] for
// the ingress). Webhook senders are third parties: a traceparent they send
// is not trusted as the parent (it would let anyone choose trace ids and
// sampling); the span starts a new trace and links to it instead.
func HTTPHandler(tp trace.TracerProvider, name string, next http.Handler) http.Handler {
	tracer := Tracer(tp)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts := []trace.SpanStartOption{
			trace.WithNewRoot(),
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("http.request.method", r.Method),
				attribute.String("http.route", r.Pattern),
			),
		}
		if remote := trace.SpanContextFromContext(propagator.Extract(r.Context(), headerCarrier(r.Header))); remote.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote}))
		}
		ctx, span := tracer.Start(r.Context(), name, opts...)
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.code))
		}
	})
}

// headerCarrier reads http.Header (canonical names) as a carrier.
type headerCarrier http.Header

func (c headerCarrier) Get(key string) string { return http.Header(c).Get(key) }
func (c headerCarrier) Set(key, value string) { http.Header(c).Set(key, value) }
func (c headerCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (the
// ingress uses it for per-request deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
