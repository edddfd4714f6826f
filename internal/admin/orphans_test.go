package admin_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The status marks a durable on HOOKS no configured consumer owns, and
// the API deletes it (audit-logged); a configured consumer's durable is
// refused.
func TestDeleteOrphanedDurable(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	ctx := context.Background()
	for _, name := range []string{"orders", "old_orders"} {
		if _, err := e.ns.JS.CreateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	var st ops.Status
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if !slices.Equal(st.OrphanedDurables, []string{"old_orders"}) {
		t.Fatalf("orphaned durables %v, want [old_orders]", st.OrphanedDurables)
	}
	for _, c := range st.Consumers {
		if c.Orphaned != (c.Name == "old_orders") {
			t.Errorf("consumer %s: orphaned %v", c.Name, c.Orphaned)
		}
	}
	e.mustCall(t, "POST", "/api/v1/consumers/orders/delete", map[string]any{}, http.StatusBadRequest, nil)
	e.mustCall(t, "POST", "/api/v1/consumers/nobody/delete", map[string]any{}, http.StatusNotFound, nil)
	var res ops.DeleteResult
	e.mustCall(t, "POST", "/api/v1/consumers/old_orders/delete", map[string]any{}, http.StatusOK, &res)
	if res.Name != "old_orders" {
		t.Fatalf("delete = %+v", res)
	}
	if _, err := e.ns.JS.Consumer(ctx, stream.Hooks, "old_orders"); err == nil {
		t.Fatal("old_orders still on HOOKS")
	}
	if _, err := e.ns.JS.Consumer(ctx, stream.Hooks, "orders"); err != nil {
		t.Fatalf("orders: %v, want it kept", err)
	}
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if len(st.OrphanedDurables) != 0 {
		t.Fatalf("orphaned durables after the delete: %v", st.OrphanedDurables)
	}
	log := e.log.String()
	if !strings.Contains(log, `"action":"consumer.delete","target":"consumer/old_orders","result":"deleted"`) ||
		!strings.Contains(log, `"action":"consumer.delete","target":"consumer/orders","result":"failed"`) {
		t.Fatalf("audit log lacks the deletes:\n%s", log)
	}
}
