package orders_test

import (
	"testing"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A handler's test with the kit: its own migrations on a fresh database,
// the real apply path, and the outbox read back.
func TestOrderCreatedAppliesOnce(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	h := orders.Handler(hookbridgetest.DefaultConsumer)
	created := hookbridgetest.NewEvent("demo", "evt-1", orders.Created, orders.WebhookBody(orders.Created, "o-1", 500))

	got := hookbridgetest.Outcomes(db.Apply(t, h, created, created))
	if got[0] != consumer.Processed || got[1] != consumer.Duplicate {
		t.Fatalf("outcomes %v, want processed then duplicate", got)
	}
	if n := db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-1'"); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
	db.RequireOutbox(t, hookbridgetest.WantOutbox{ID: "hookbridgetest:demo:evt-1", Subject: "events.orders.created"})
}
