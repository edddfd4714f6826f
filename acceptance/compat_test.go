package acceptance

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestCompatibilityWithExternalNATS runs the ingress and a single-type
// consumer against an external, possibly older NATS server (the CI
// machine's 2.9). .ci/run sets HOOKBRIDGE_COMPAT_NATS_URL and fails if that
// server is down; elsewhere the test says why it did not run.
func TestCompatibilityWithExternalNATS(t *testing.T) {
	url := os.Getenv("HOOKBRIDGE_COMPAT_NATS_URL")
	if url == "" {
		t.Skip("HOOKBRIDGE_COMPAT_NATS_URL is not set; .ci/run sets it to the system NATS server")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("external NATS at %s: %v", url, err)
	}
	defer nc.Close()
	t.Logf("external NATS server version %s", nc.ConnectedServerVersion())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The external server is shared: start from empty streams and leave
	// none behind.
	for _, name := range []string{stream.Hooks, stream.Conflicts} {
		_ = js.DeleteStream(ctx, name)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	if err := stream.EnsureIngress(ctx, js, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	db := hookbridgetest.Postgres(t, orders.Migrations())

	v, _ := verify.NewStandardWebhooks([]string{secret}, 0)
	id, typ := bridge.DefaultFields(verify.SchemeStandardWebhooks)
	h, err := bridge.New(js, bridge.Options{Sources: []bridge.Source{{Name: "demo", Verifier: v, EventID: id, EventType: typ}}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(bridge.Pattern, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c, err := engine.New(db.Pool, js, engine.Options{
		Name: "orders_compat", Sources: []string{"demo"}, EventTypes: []string{orders.Created},
		Handler: orders.Handler("orders_compat"), Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Run(runCtx) }()
	defer func() { cancel(); wg.Wait() }()

	p := &pipeline{t: t, db: db, url: srv.URL + "/webhooks/demo"}
	body := orders.WebhookBody(orders.Created, "o-compat", 100)
	code, r := p.post("evt-compat", body)
	expect(t, code, r, http.StatusAccepted, "accepted")
	code, r = p.post("evt-compat", body)
	expect(t, code, r, http.StatusOK, "duplicate")
	code, r = p.post("evt-compat", orders.WebhookBody(orders.Created, "o-compat", 200))
	expect(t, code, r, http.StatusConflict, "conflict")
	hookbridgetest.Eventually(t, time.Minute, "order applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM demo.orders") == 1
	})
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 1 {
		t.Fatalf("inbox rows = %d, want 1", n)
	}
}
