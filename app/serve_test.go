package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// slowOrders is the orders handler with a pause, reporting when it starts,
// so a test can stop the server while an apply is in flight.
func slowOrders(started chan<- struct{}) Handlers {
	h := ordersHandlers()
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

// postOrder sends a signed order.created for orderID as event id and
// returns the status.
func postOrder(t *testing.T, addr, id, orderID string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"type": orders.Created, "data": map[string]any{"order_id": orderID, "amount_cents": 5, "currency": "EUR"}})
	req, err := hookbridgetest.NewSignedRequest(context.Background(), "http://"+addr+"/webhooks/demo", hookbridgetest.Delivery{Secret: testSecret, ID: id, Time: time.Now(), Body: body})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestServeAppliesAndShutsDownGracefully runs the real serve wiring with
// the embedded JetStream server, stops it while an event is being applied,
// and checks the apply was committed and acked: nothing is redelivered.
func TestServeAppliesAndShutsDownGracefully(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	started := make(chan struct{}, 1)
	handlers := slowOrders(started)
	cfg := testConfig(t, handlers, func(c *Config) { c.DatabaseURL = db.URL })
	srv := startServer(t, cfg, handlers)

	hookbridgetest.Eventually(t, time.Minute, "ready", func() bool {
		return getStatus(t, "http://"+srv.addr+"/readyz") == http.StatusOK
	})
	if code := postOrder(t, srv.addr, "evt-1", "o-1"); code != http.StatusAccepted {
		t.Fatalf("status %d, want 202", code)
	}

	<-started // the apply is in flight: stop now, as SIGTERM would
	if err := srv.stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	if n := db.Count(t, "SELECT count(*) FROM demo.orders"); n != 1 {
		t.Fatalf("orders = %d, want 1: the in-flight apply must finish", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 1 {
		t.Fatalf("inbox = %d, want 1", n)
	}

	// Reopen the embedded store: the message must be acked, not pending.
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(cfg.DataDir, "jetstream")})
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
	// The demo source is keyed: its message went to its key's partition.
	var acked uint64
	hooks, err := js.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	list := hooks.ListConsumers(context.Background())
	for info := range list.Info() {
		if owner, _ := stream.ConsumerOfDurable(info.Name); owner != "orders" {
			continue
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Fatalf("durable %s after shutdown: ack pending %d, pending %d; want 0, 0", info.Name, info.NumAckPending, info.NumPending)
		}
		acked = max(acked, info.AckFloor.Stream)
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
	if acked != 1 {
		t.Fatalf("the message was not acked: highest ack floor of the orders durables %d, want 1", acked)
	}
}

// TestServeRelaysOutboxEvents follows one webhook through all three roles:
// applied once, its outbox row published to EVENTS with the stable id and
// marked sent.
func TestServeRelaysOutboxEvents(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) { c.DatabaseURL = db.URL })
	srv := startServer(t, cfg, ordersHandlers())

	for range 2 { // the second delivery is a duplicate and must not add an event
		postOrder(t, srv.addr, "evt-9", "o-9")
	}
	hookbridgetest.Eventually(t, time.Minute, "outbox row sent", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'") == 1
	})
	info := streamInfo(t, srv.js, stream.Events)
	if info.State.Msgs != 1 {
		t.Fatalf("EVENTS holds %d messages, want 1", info.State.Msgs)
	}
	s, err := srv.js.Stream(context.Background(), stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetMsg(context.Background(), info.State.LastSeq)
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
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL = "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	})
	srv := startServer(t, cfg, ordersHandlers())

	if got := getStatus(t, "http://"+srv.addr+"/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d, want 503 without Postgres", got)
	}
	// The NATS check answers within readyz's 2 s on a quiet machine only.
	var got int
	hookbridgetest.Eventually(t, time.Minute, "the ingress ready", func() bool {
		got = getStatus(t, "http://"+srv.addr+"/readyz?role=ingress")
		return got == http.StatusOK
	})
	if got != http.StatusOK {
		t.Fatalf("/readyz?role=ingress = %d, want 200: the ingress needs NATS only", got)
	}
	for i := range 3 {
		if code := postOrder(t, srv.addr, fmt.Sprint("evt-", i), fmt.Sprint("o-", i)); code != http.StatusAccepted {
			t.Fatalf("delivery %d: status %d, want 202 while Postgres is down", i, code)
		}
	}
	if n := streamInfo(t, srv.js, stream.Hooks).State.Msgs; n != 3 {
		t.Fatalf("HOOKS holds %d messages, want 3", n)
	}
}
