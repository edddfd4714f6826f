package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

// serve --role relay --role delivery: an outbox message reaches the
// configured endpoint, signed, with its outbox id as webhook-id, and the
// attempt is recorded.
func TestDeliveryRoleDeliversTheOutbox(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	v, err := verify.NewStandardWebhooks([]string{secret}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []string
	var verr []error
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		ids = append(ids, r.Header.Get("Webhook-Id"))
		if err := v.Verify(r.Header, body, time.Now()); err != nil {
			verr = append(verr, err)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)

	db := hookbridgetest.Postgres(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL = db.URL
		c.Delivery.Endpoints = []EndpointConfig{{Name: "partner", URL: recv.URL, Subjects: stringList{"events.orders.>"},
			Secrets: stringList{secret}, AllowPrivate: true}}
	})
	srv := startServer(t, cfg, ordersHandlers(), RoleRelay, RoleDelivery)
	// Wait for the endpoint's durable, so the message is published after
	// it: a new endpoint starts with the events published from then on.
	hookbridgetest.Eventually(t, time.Minute, "the endpoint's consumer", func() bool {
		_, err := srv.js.Consumer(context.Background(), "EVENTS", "delivery_partner")
		return err == nil
	})
	err = pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(context.Background(), tx, publisher.Message{ID: "ord-1-created", Subject: "events.orders.created", Payload: []byte(`{"order_id":"1"}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_attempts WHERE endpoint = 'partner' AND status_code = 204"); n != 1 {
		t.Fatalf("attempts = %d, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 1 || ids[0] != "ord-1-created" || len(verr) != 0 {
		t.Fatalf("receiver saw ids %v, verify errors %v", ids, verr)
	}
}

// The delivery role is observed: a span per attempt, a child of the trace
// the event carries, whose context the endpoint gets in traceparent; and
// per-endpoint metrics: attempts by class, the state gauge, the backlog.
func TestDeliveryIsObserved(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var mu sync.Mutex
	var traceparents []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("traceparent"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	db := hookbridgetest.Postgres(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL = db.URL
		c.Delivery.Endpoints = []EndpointConfig{{Name: "partner", URL: recv.URL, Subjects: stringList{"events.orders.>"},
			Secrets: stringList{secret}, AllowPrivate: true}}
	})
	srv, err := NewServer(cfg, ordersHandlers(), []string{RoleRelay, RoleDelivery}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv.SetTracerProvider(tp)
	rs := startPrepared(t, srv)
	hookbridgetest.Eventually(t, time.Minute, "the endpoint's consumer", func() bool {
		_, err := rs.js.Consumer(context.Background(), "EVENTS", "delivery_partner")
		return err == nil
	})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	err = pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(context.Background(), tx, publisher.Message{ID: "ord-7", Subject: "events.orders.created",
			Payload: []byte(`{"order_id":"7"}`), Header: map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_attempts WHERE status_code = 204"); n != 1 {
		t.Fatalf("attempts = %d, want 1", n)
	}
	var span sdktrace.ReadOnlySpan
	hookbridgetest.Eventually(t, time.Minute, "the attempt's span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == spanDeliveryAttempt {
				span = s
				return true
			}
		}
		return false
	})
	if span.Parent().TraceID().String() != traceID || span.Parent().SpanID().String() != parentID || span.SpanKind() != trace.SpanKindClient {
		t.Fatalf("attempt span's parent %v (kind %v), want the event's %s/%s", span.Parent(), span.SpanKind(), traceID, parentID)
	}
	mu.Lock()
	got := traceparents[0]
	mu.Unlock()
	if want := "00-" + traceID + "-" + span.SpanContext().SpanID().String() + "-01"; got != want {
		t.Fatalf("endpoint got traceparent %q, want the attempt span's %q", got, want)
	}
	var body string
	hookbridgetest.Eventually(t, time.Minute, "the delivery metrics", func() bool {
		resp, err := http.Get("http://" + rs.addr + MetricsPath)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, `hookbridge_delivery_attempts_total{class="2xx",endpoint="partner"} 1`)
	})
	for _, want := range []string{
		`hookbridge_delivery_successes_total{endpoint="partner"} 1`,
		`hookbridge_delivery_failures_total{class="5xx",endpoint="partner"} 0`,
		`hookbridge_delivery_attempt_seconds_count{endpoint="partner"} 1`,
		`hookbridge_delivery_endpoint_state{endpoint="partner",state="enabled"} 1`,
		`hookbridge_delivery_endpoint_state{endpoint="partner",state="disabled"} 0`,
		`hookbridge_delivery_backlog{endpoint="partner",where="postgres"} 0`,
		`hookbridge_delivery_dead_letters{endpoint="partner"} 0`,
		`hookbridge_delivery_info_up 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Outbox rows committed before serve starts reach a new endpoint, also
// when the relay runs on an instance of its own and the delivery role
// starts only after the relay published them: every instance running the
// relay or the delivery role creates the endpoints' durables before the
// relay publishes (a durable starts with the events published after it,
// so the events a relay published first were lost to the endpoint).
func TestOutboxRelayedBeforeTheDeliveryRoleStartsReachesANewEndpoint(t *testing.T) {
	t.Parallel()
	const n = 50
	var mu sync.Mutex
	seen := map[string]int{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Webhook-Id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	for i := range n {
		err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
			return publisher.Enqueue(context.Background(), tx, publisher.Message{ID: fmt.Sprintf("early-%d", i),
				Subject: "events.orders.created", Payload: []byte(`{"order_id":"1"}`)})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL, c.NATSURL = db.URL, ns.URL()
		c.Delivery.Endpoints = []EndpointConfig{{Name: "partner", URL: recv.URL, Subjects: stringList{"events.orders.>"},
			Secrets: stringList{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, AllowPrivate: true}}
	})
	startServer(t, cfg, ordersHandlers(), RoleRelay)
	db.AwaitCount(t, n, "SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'")
	deliverer := startServer(t, cfg, ordersHandlers(), RoleDelivery)
	// A load balancer or a script can ask for the delivery role alone.
	hookbridgetest.Eventually(t, time.Minute, "/readyz?role=delivery answered 200", func() bool {
		resp, err := http.Get("http://" + deliverer.addr + "/readyz?role=delivery")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	db.AwaitCount(t, n, "SELECT count(DISTINCT event_id) FROM hookbridge.delivery_attempts WHERE endpoint = 'partner' AND status_code = 204")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("receiver saw %d distinct events, want %d", len(seen), n)
	}
}
