package orders_test

import (
	"strings"
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

// A batch of interleaved types is applied as runs of one type, and the
// announcements of all its runs are written together: the outbox view
// shows each of them, in stream order, and they take one pack.
func TestBatchOfSeveralTypesWritesOnePack(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	h := orders.Handler(hookbridgetest.DefaultConsumer)
	var evs []consumer.Event
	var want []hookbridgetest.WantOutbox
	for i, typ := range []string{orders.Created, orders.Created, orders.Paid, orders.Created, orders.Paid, orders.Cancelled} {
		order := []string{"o-1", "o-2", "o-1", "o-3", "o-3", "o-2"}[i]
		id := "evt-" + string(rune('a'+i))
		evs = append(evs, hookbridgetest.NewEvent("demo", id, typ, orders.WebhookBody(typ, order, 500)))
		want = append(want, hookbridgetest.WantOutbox{ID: "hookbridgetest:demo:" + id, Subject: "events.orders." + strings.TrimPrefix(typ, "order.")})
	}
	for i, o := range db.Apply(t, h, evs...) {
		if o.Outcome != consumer.Processed {
			t.Fatalf("event %d: %s %v", i, o.Outcome, o.Err)
		}
	}
	db.RequireOutbox(t, want...)
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.outbox_packs"); n != 1 {
		t.Fatalf("packs = %d, want 1", n)
	}
}
