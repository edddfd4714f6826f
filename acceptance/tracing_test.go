package acceptance

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/internal/tracing"
)

// TestOneTraceFollowsAWebhookToItsEvent runs the real serve wiring with
// an in-memory span recorder and follows one webhook: the receive span is
// a new root, the publish span its child, the consumer's apply span a
// child of the publish span through the traceparent header of the HOOKS
// message, and the relay's publish span a child of the apply span through
// the outbox row's headers; the EVENTS message carries the same context.
func TestOneTraceFollowsAWebhookToItsEvent(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	db := hookbridgetest.Postgres(t, orders.Migrations())
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := serveApp(t, js, db, func(s *app.Server) { s.SetTracerProvider(tp) })

	req, err := hookbridgetest.NewSignedRequest(context.Background(), "http://"+a.addr+"/webhooks/demo", hookbridgetest.Delivery{Secret: secret, ID: "evt-t1", Time: time.Now(), Body: orders.WebhookBody(orders.Created, "o-t1", 100)})
	if err != nil {
		t.Fatal(err)
	}
	// A sender's own traceparent is linked, never adopted as the parent.
	senderCtx := "00-11111111111111111111111111111111-2222222222222222-01"
	req.Header.Set("traceparent", senderCtx)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", resp.StatusCode)
	}

	byName := map[string]sdktrace.ReadOnlySpan{}
	hookbridgetest.Eventually(t, time.Minute, "the four spans", func() bool {
		for _, s := range rec.Ended() {
			byName[s.Name()] = s
		}
		return byName[tracing.SpanReceive] != nil && byName[tracing.SpanPublish] != nil &&
			byName[tracing.SpanApply] != nil && byName[tracing.SpanRelayPublish] != nil
	})
	receive, publish := byName[tracing.SpanReceive], byName[tracing.SpanPublish]
	apply, relay := byName[tracing.SpanApply], byName[tracing.SpanRelayPublish]
	for name, s := range map[string]sdktrace.ReadOnlySpan{"receive": receive, "publish": publish, "apply": apply} {
		if s == nil {
			t.Fatalf("no %s span; recorded %v", name, names(rec.Ended()))
		}
	}
	traceID := receive.SpanContext().TraceID()
	if receive.Parent().IsValid() {
		t.Fatalf("receive span has parent %v; a sender's traceparent must not become the parent", receive.Parent())
	}
	if len(receive.Links()) != 1 || receive.Links()[0].SpanContext.TraceID().String() != "11111111111111111111111111111111" {
		t.Fatalf("receive span links = %v, want the sender's context", receive.Links())
	}
	if receive.SpanContext().TraceID().String() == "11111111111111111111111111111111" {
		t.Fatal("the sender chose the trace id")
	}
	checkParent(t, "publish", publish, receive, false)
	checkParent(t, "apply", apply, publish, true) // through the HOOKS message's headers
	checkParent(t, "relay publish", relay, apply, true)
	for _, s := range []sdktrace.ReadOnlySpan{publish, apply, relay} {
		if s.SpanContext().TraceID() != traceID {
			t.Fatalf("%s is in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
	}

	// The outbox row stored the apply's context, and the relay published it.
	var raw []byte
	if err := db.Pool.QueryRow(context.Background(), `SELECT headers::text FROM hookbridge.outbox`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var hdr map[string]string
	if err := json.Unmarshal(raw, &hdr); err != nil {
		t.Fatal(err)
	}
	wantParent := "00-" + traceID.String() + "-" + apply.SpanContext().SpanID().String() + "-01"
	if hdr["traceparent"] != wantParent {
		t.Fatalf("outbox headers = %v, want traceparent %s", hdr, wantParent)
	}
	s, err := js.JS.Stream(context.Background(), stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(context.Background(), "events.>")
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get("traceparent"); got != wantParent {
		t.Fatalf("EVENTS message traceparent = %q, want %q", got, wantParent)
	}
	hooks, err := js.JS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	hm, err := hooks.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hm.Header.Get("traceparent"), "00-"+traceID.String()+"-"+publish.SpanContext().SpanID().String()+"-01"; got != want {
		t.Fatalf("HOOKS message traceparent = %q, want %q", got, want)
	}
}

func checkParent(t *testing.T, what string, child, parent sdktrace.ReadOnlySpan, remote bool) {
	t.Helper()
	if child == nil {
		t.Fatalf("no %s span", what)
	}
	p := child.Parent()
	if p.SpanID() != parent.SpanContext().SpanID() || p.TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("%s span's parent = %s/%s, want %s (%s/%s)", what, p.TraceID(), p.SpanID(),
			parent.Name(), parent.SpanContext().TraceID(), parent.SpanContext().SpanID())
	}
	if p.IsRemote() != remote {
		t.Fatalf("%s span's parent remote = %v, want %v (it must come from the headers)", what, p.IsRemote(), remote)
	}
	if child.SpanKind() == trace.SpanKindUnspecified {
		t.Fatalf("%s span has no kind", what)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}
