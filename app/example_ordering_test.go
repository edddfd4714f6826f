package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/schema"
)

// shopConfig declares a source whose events name the order they are
// about, and a consumer of them: the events of one order apply in the
// order the ingress accepted them, whatever the concurrency, and different
// orders in parallel.
const shopConfig = `
sources:
  - name: shop
    scheme: standard-webhooks
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
    ordering_key: {pointer: /data/order_id}
consumers:
  - name: fulfilment
    handler: fulfilment
    sources: [shop]
    concurrency: 4
    backoff: [50ms]
`

var shopSchema = schema.Set{Name: "shop", FS: fstest.MapFS{
	"0001_orders.sql": {Data: []byte(`CREATE SCHEMA shop;
CREATE TABLE shop.orders (id text PRIMARY KEY, history text[] NOT NULL);`)},
}}

// fulfilment records each order's events in the order it applies them,
// noting a redelivery. The payment service is down for the first delivery
// of o-1's order.paid: that delivery fails and is retried after the
// backoff. Without an ordering key o-1's order.shipped, accepted after
// it, could apply before the retry; with one it waits for it, while o-2
// goes on.
func fulfilment(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var body struct {
		Data struct {
			OrderID string `json:"order_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Body, &body); err != nil {
		return consumer.Permanent(err)
	}
	if ev.Type == "order.paid" && body.Data.OrderID == "o-1" && ev.NumDelivered == 1 {
		return errors.New("payment service unavailable")
	}
	applied := ev.Type
	if ev.NumDelivered > 1 {
		applied += " (redelivered)"
	}
	_, err := tx.Exec(ctx, `INSERT INTO shop.orders (id, history) VALUES ($1, ARRAY[$2])
		ON CONFLICT (id) DO UPDATE SET history = orders.history || $2`, body.Data.OrderID, applied)
	return err
}

// An ordered consumer, run as serve runs it, on a test database and
// JetStream: events of two orders are sent interleaved, one of them fails
// once, and each order still ends with its events applied in the order
// they were sent. (With ordering_key: none the same run can end with
// o-1's order.shipped before its redelivered order.paid, and o-2's events
// the other way round.)
func ExampleNewServer_orderingKey() {
	handlers := app.Handlers{"fulfilment": {
		New:        func(string) consumer.Handler { return consumer.HandlerFunc(fulfilment) },
		EventTypes: []string{"order.created", "order.paid", "order.shipped", "order.cancelled"},
		Migrations: []schema.Set{shopSchema},
	}}
	hookbridgetest.Example(func(t testing.TB) {
		db := hookbridgetest.Postgres(t)
		js := hookbridgetest.NATS(t)
		dir := hookbridgetest.WriteFiles(t, map[string]string{"hookbridge.yaml": shopConfig})
		noEnv := func(string) (string, bool) { return "", false }
		cfg, err := app.Load(filepath.Join(dir, "hookbridge.yaml"), noEnv, app.Overrides{
			HTTPAddr: "127.0.0.1:0", DatabaseURL: db.URL, NATSURL: js.URL(), DataDir: t.TempDir()}, handlers)
		if err != nil {
			t.Fatal(err)
		}
		addr := serve(t, cfg, handlers)

		for i, e := range [][2]string{
			{"o-1", "order.created"}, {"o-2", "order.created"}, {"o-1", "order.paid"},
			{"o-2", "order.cancelled"}, {"o-1", "order.shipped"},
		} {
			send(t, addr, fmt.Sprintf("evt-%d", i+1), e[1], e[0])
		}
		hookbridgetest.Eventually(t, time.Minute, "five events applied", func() bool {
			return db.Count(t, `SELECT coalesce(sum(cardinality(history)), 0) FROM shop.orders`) == 5
		})
		rows, err := db.Pool.Query(context.Background(), `SELECT id, history FROM shop.orders ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		var id string
		var history []string
		if _, err := pgx.ForEachRow(rows, []any{&id, &history}, func() error {
			fmt.Printf("%s: %s\n", id, strings.Join(history, ", "))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	// Output:
	// o-1: order.created, order.paid (redelivered), order.shipped
	// o-2: order.created, order.cancelled
}

// serve runs the server until the end of the example and returns its
// webhook address once it is ready.
func serve(t testing.TB, cfg app.Config, handlers app.Handlers) string {
	srv, err := app.NewServer(cfg, handlers, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	listening, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { listening <- addr }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var addr string
	select {
	case addr = <-listening:
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("serve did not start: %v", err)
	}
	hookbridgetest.Eventually(t, time.Minute, "ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr
}

// send posts an event of the shop, signed with its secret, and fails
// unless the ingress accepted it.
func send(t testing.TB, addr, id, eventType, orderID string) {
	body := fmt.Sprintf(`{"type":%q,"timestamp":"2026-01-02T03:04:05Z","data":{"order_id":%q}}`, eventType, orderID)
	req := hookbridgetest.SignedRequest(t, "http://"+addr+"/webhooks/shop", hookbridgetest.Delivery{
		Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", ID: id, Body: []byte(body)})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%s: status %d", id, resp.StatusCode)
	}
}
