package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookbridge/hookbridge/internal/engine"
)

// TestReceiveSpanStartsANewTrace: a sender's traceparent is linked, not
// adopted, and the status code is recorded.
func TestReceiveSpanStartsANewTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var inner trace.SpanContext
	h := receiveHandler(tp, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	req := httptest.NewRequest(http.MethodPost, "/webhooks/demo", nil)
	req.Header.Set("Traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("spans = %d, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent().IsValid() || s.SpanContext().TraceID().String() == "11111111111111111111111111111111" {
		t.Fatalf("span adopted the sender's context: parent %v trace %v", s.Parent(), s.SpanContext().TraceID())
	}
	if len(s.Links()) != 1 {
		t.Fatalf("links = %v, want the sender's context", s.Links())
	}
	if inner.SpanID() != s.SpanContext().SpanID() {
		t.Fatal("the handler did not run inside the span")
	}
	if s.Status().Code.String() != "Error" {
		t.Fatalf("status = %v, want Error for a 503", s.Status())
	}
}

// Every outcome a running consumer reports is counted, postponed too (it
// was dropped: the counts stopped at dead_lettered).
func TestCountOutcomesCountsEveryMessageOutcome(t *testing.T) {
	outs := engine.MessageOutcomes()
	n := countOutcomes(outs)
	for _, o := range outs {
		if int(o) >= len(n) || n[o] != 1 {
			t.Errorf("outcome %s not counted", o)
		}
	}
}
