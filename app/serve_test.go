package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/internal/testenv"
)

// slowOrders is the orders handler with a pause, reporting when it starts,
// so a test can stop the server while an apply is in flight.
func slowOrders(started chan<- struct{}) Handlers {
	h := BuiltinHandlers()
	spec := h["orders"]
	inner := spec.New
	spec.New = func(name string) consumer.Handler {
		next := inner(name)
		return consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			select {
			case started <- struct{}{}:
			default:
			}
			time.Sleep(500 * time.Millisecond)
			return next.Handle(ctx, tx, ev)
		})
	}
	h["orders"] = spec
	return h
}

// TestServeAppliesAndShutsDownGracefully runs the real serve wiring with
// the embedded JetStream server, stops it while an event is being applied,
// and checks the apply was committed and acked: nothing is redelivered.
func TestServeAppliesAndShutsDownGracefully(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	dataDir := t.TempDir()
	env := mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	cfg := Config{HTTPAddr: "127.0.0.1:0", DatabaseURL: db.URL, DataDir: dataDir}
	cfg.ApplyEnv(env)
	cfg.Sources = DefaultSources(env)
	cfg.Consumers = DefaultConsumers()
	started := make(chan struct{}, 1)
	handlers := slowOrders(started)
	if err := cfg.Validate(env, handlers); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, handlers, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { addrCh <- addr }) }()
	addr := <-addrCh

	testenv.Eventually(t, 10*time.Second, "ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	body, _ := json.Marshal(map[string]any{"type": orders.Created, "data": map[string]any{"order_id": "o-1", "amount_cents": 5, "currency": "EUR"}})
	req, err := SignedRequest(ctx, "http://"+addr+"/webhooks/demo", cfg.Sources[0].secretsRead[0], "evt-1", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", resp.StatusCode)
	}

	<-started // the apply is in flight: stop now, as SIGTERM would
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if n := db.Count(t, "SELECT count(*) FROM demo.orders"); n != 1 {
		t.Fatalf("orders = %d, want 1: the in-flight apply must finish", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 1 {
		t.Fatalf("inbox = %d, want 1", n)
	}

	// Reopen the embedded store: the message must be acked, not pending.
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dataDir, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := embedded.Connect(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	c, err := js.Consumer(context.Background(), stream.Hooks, "orders")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream != 1 {
		t.Fatalf("consumer after shutdown: ack pending %d, pending %d, ack floor %d; want 0, 0, 1",
			info.NumAckPending, info.NumPending, info.AckFloor.Stream)
	}
}

// TestServeRelaysOutboxEvents follows one webhook through all three roles:
// applied once, its outbox row published to EVENTS with the stable id and
// marked sent.
func TestServeRelaysOutboxEvents(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	env := mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	cfg := Config{HTTPAddr: "127.0.0.1:0", DatabaseURL: db.URL, DataDir: t.TempDir()}
	cfg.ApplyEnv(env)
	cfg.Sources = DefaultSources(env)
	cfg.Consumers = DefaultConsumers()
	if err := cfg.Validate(env, BuiltinHandlers()); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, BuiltinHandlers(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { addrCh <- addr }) }()
	defer func() { cancel(); <-done }()
	addr := <-addrCh

	body, _ := json.Marshal(map[string]any{"type": orders.Created, "data": map[string]any{"order_id": "o-9", "amount_cents": 9, "currency": "EUR"}})
	for range 2 { // the second delivery is a duplicate and must not add an event
		req, err := SignedRequest(ctx, "http://"+addr+"/webhooks/demo", cfg.Sources[0].secretsRead[0], "evt-9", time.Now(), body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	testenv.Eventually(t, 10*time.Second, "outbox row sent", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'") == 1
	})
	s, err := srv.js.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("EVENTS holds %d messages, want 1", info.State.Msgs)
	}
	msg, err := s.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(stream.HeaderMsgID); got != "orders:demo:evt-9" || msg.Subject != "events.orders.created" {
		t.Fatalf("relayed %s with id %q, want events.orders.created with orders:demo:evt-9", msg.Subject, got)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.outbox"); n != 1 {
		t.Fatalf("outbox rows = %d, want 1", n)
	}
}

// TestIngressAcceptsWhilePostgresIsDown runs every role with an unreachable
// database: webhooks are still accepted and stored in JetStream, the
// ingress reports ready through /readyz?role=ingress, and the instance as
// a whole does not.
func TestIngressAcceptsWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	env := mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	cfg := Config{HTTPAddr: "127.0.0.1:0", DatabaseURL: "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", DataDir: t.TempDir()}
	cfg.ApplyEnv(env)
	cfg.Sources = DefaultSources(env)
	cfg.Consumers = DefaultConsumers()
	if err := cfg.Validate(env, BuiltinHandlers()); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, BuiltinHandlers(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { addrCh <- addr }) }()
	defer func() { cancel(); <-done }()
	addr := <-addrCh

	status := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d, want 503 without Postgres", got)
	}
	if got := status("/readyz?role=ingress"); got != http.StatusOK {
		t.Fatalf("/readyz?role=ingress = %d, want 200: the ingress needs NATS only", got)
	}
	for i := range 3 {
		body, _ := json.Marshal(map[string]any{"type": orders.Created, "data": map[string]any{"order_id": fmt.Sprint("o-", i), "amount_cents": 1, "currency": "EUR"}})
		req, err := SignedRequest(ctx, "http://"+addr+"/webhooks/demo", cfg.Sources[0].secretsRead[0], fmt.Sprint("evt-", i), time.Now(), body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d: status %d, want 202 while Postgres is down", i, resp.StatusCode)
		}
	}
	s, err := srv.js.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Fatalf("HOOKS holds %d messages, want 3", info.State.Msgs)
	}
}
