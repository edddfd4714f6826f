package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A durable that no configured consumer owns and that holds accepted
// messages (a consumer taken out of the configuration) is a warning on
// /readyz, naming the command that removes it; readiness stands. One
// that holds nothing, or a configured consumer's, is not.
func TestReadyzWarnsOfAStrandingDurable(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	j.EnsureHooks(t)
	ctx := context.Background()
	if _, err := stream.Ensure(ctx, j.JS, stream.EventsConfig(stream.Options{})); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		j.PublishHook(t, "demo", fmt.Sprint("e-", i), "order.created", orders.WebhookBody("order.created", fmt.Sprint("o-", i), 1))
	}
	ackUpTo(t, j, "orders", 0)                                     // configured, 10 pending
	ackUpTo(t, j, "removed", 4)                                    // orphaned, 6 pending
	ackUpTo(t, j, stream.PartitionDurable("removed_keyed", 3), 10) // orphaned, nothing pending
	g := &storeGuard{js: j.JS, log: quietLogger(), consumers: []string{"orders"}}
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	readyz(nil, g.strandedWarnings)(rec, httptest.NewRequest("GET", "/readyz", nil))
	var body struct {
		Ready    bool     `json:"ready"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("readyz body %q: %v", rec.Body.String(), err)
	}
	if rec.Code != http.StatusOK || !body.Ready {
		t.Fatalf("readyz %d %s: a stranding durable must not fail readiness", rec.Code, rec.Body.String())
	}
	if len(body.Warnings) != 1 || !strings.Contains(body.Warnings[0], "durable removed ") ||
		!strings.Contains(body.Warnings[0], "6 unapplied") || !strings.Contains(body.Warnings[0], "hookbridge consumers delete removed") {
		t.Fatalf("warnings %q, want one naming durable removed, its 6 messages and the delete command", body.Warnings)
	}
}
