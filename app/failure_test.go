package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// limitedNATS starts a NATS server listening on loopback whose JetStream
// allows at most maxAckPending outstanding acks per consumer.
func limitedNATS(t *testing.T, maxAckPending int) string {
	t.Helper()
	return loopbackNATS(t, func(o *server.Options) { o.JetStreamLimits.MaxAckPending = maxAckPending })
}

// loopbackNATS starts a JetStream-enabled NATS server on loopback with its
// store in a temporary folder, edited by edit, and returns its URL.
func loopbackNATS(t *testing.T, edit func(*server.Options)) string {
	t.Helper()
	opts := &server.Options{JetStream: true, StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true}
	edit(opts)
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	return ns.ClientURL()
}

// TestRefusedConsumerStopsServe updates the orders durable to a
// max_ack_pending above the server's limit, which the server refuses.
// serve must log the failure at once, report not ready, and return the
// error promptly (a non-zero exit): not only at shutdown, and not with
// /readyz green because the durable as it was before the update exists.
func TestRefusedConsumerStopsServe(t *testing.T) {
	t.Parallel()
	url := limitedNATS(t, 100)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := stream.EnsureIngress(ctx, js, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	// The durable as an earlier configuration left it.
	if _, err := js.CreateOrUpdateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{
		Durable: "orders", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 50,
		FilterSubject: stream.HookFilter("demo", "order.created"),
	}); err != nil {
		t.Fatal(err)
	}

	db := hookbridgetest.Postgres(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL, c.NATSURL = db.URL, url
		c.Consumers = DefaultConsumers()
		c.Consumers[0].MaxAckPending = 5000
	})
	var logs hookbridgetest.LogBuffer
	srv, err := NewServer(cfg, ordersHandlers(), nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- srv.Run(runCtx, nil) }()

	select {
	case err = <-done:
	case <-time.After(2 * time.Minute): // promptly: before, serve returned only at shutdown
		cancel()
		<-done
		t.Fatalf("serve still running 2m after the server refused the consumer; logs:\n%s", logs.String())
	}
	if err == nil || !strings.Contains(err.Error(), "max ack pending") {
		t.Fatalf("serve returned %v, want the refusal", err)
	}
	t.Logf("serve stopped %s after start: %v", time.Since(start).Round(time.Millisecond), err)
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "consumer orders") {
		t.Fatalf("no ERROR line naming the consumer; logs:\n%s", logs.String())
	}
	// Readiness, as /readyz answers it from the moment of the failure.
	rec := httptest.NewRecorder()
	readyz([]check{{name: "roles", fn: func(context.Context) error { return srv.roleFailure() }}})(rec, httptest.NewRequest("GET", "/readyz?role=consumer", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after the failure = %d, want 503", rec.Code)
	}
	if !errors.Is(srv.roleFailure(), err) && srv.roleFailure().Error() != err.Error() {
		t.Fatalf("readiness reports %v, serve returned %v", srv.roleFailure(), err)
	}
}
