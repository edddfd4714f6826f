package app

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// Keyed messages stored for a consumer whose configuration has no key
// (another instance still keys the source, during a rolling change) are
// read only by partition durables that do not exist yet: the storage
// guard, short of room, must not purge them before they are applied.
func TestGuardKeepsKeyedMessagesOfAKeylessConsumer(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	js := hookbridgetest.NATS(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL, c.NATSURL = db.URL, js.URL()
		c.Sources = DefaultSources(mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": testSecret}))
		c.Sources[0].OrderingKey = &KeyConfig{None: true}
	})
	srv := startServer(t, cfg, ordersHandlers())
	js.PublishHook(t, "demo", "u-1", orders.Created, orders.WebhookBody(orders.Created, "o-u", 100))
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.inbox`)
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("o-%d", i)
		js.PublishKeyedHook(t, "demo", "k-"+id, orders.Created, id, orders.WebhookBody(orders.Created, id, 100))
	}
	js.PublishHook(t, "demo", "u-2", orders.Created, orders.WebhookBody(orders.Created, "o-v", 100))
	db.AwaitCount(t, 2, `SELECT count(*) FROM hookbridge.inbox WHERE event_id LIKE 'u-%'`)

	// The store is full: trim everything no durable needs.
	g := &storeGuard{js: js.JS, log: quietLogger(), consumers: srv.consumerNames(), keyless: srv.keylessConsumers(),
		refused: func() error { return errors.New("insufficient resources") }}
	if err := g.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, time.Minute, "the keyed events applied, not purged", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id LIKE 'k-%'`) == 3
	})
}
