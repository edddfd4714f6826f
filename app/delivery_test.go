package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
