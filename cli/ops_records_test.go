package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// conflicts show prints both bodies, as the console does: the original,
// read back from HOOKS, and the rejected one.
func TestConflictsShowPrintsBothBodies(t *testing.T) {
	t.Parallel()
	db, ns, flags := opsEnv(t)
	ctx := context.Background()
	original := orders.WebhookBody(orders.Created, "o-1", 100)
	rejected := orders.WebhookBody(orders.Created, "o-1", 999)
	seq := ns.PublishHook(t, "demo", "evt-c", orders.Created, original)
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return engine.RecordConflict(ctx, tx, engine.ConflictRecord{DetectedBy: "ingress", Source: "demo", EventID: "evt-c",
			EventType: orders.Created, OriginalSeq: int64(seq), RejectedBody: rejected})
	})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(db.Count(t, "SELECT id FROM hookbridge.conflicts"))
	out, err := runOps(t, append([]string{"conflicts", "show", id}, flags...)...)
	if err != nil {
		t.Fatalf("conflicts show: %v\n%s", err, out)
	}
	want := fmt.Sprintf("\noriginal body (applied) (%d bytes):\n%s\n\nrejected body (%d bytes):\n%s\n", len(original), original, len(rejected), rejected)
	if !strings.HasSuffix(out, want) {
		t.Fatalf("conflicts show does not end with both bodies:\n%s", out)
	}
	out, err = runOps(t, append([]string{"conflicts", "show", id, "--json"}, flags...)...)
	var shown struct {
		RejectedBody string `json:"rejected_body"`
		OriginalBody string `json:"original_body"`
	}
	if err != nil || json.Unmarshal([]byte(out), &shown) != nil || shown.RejectedBody != string(rejected) || shown.OriginalBody != string(original) {
		t.Fatalf("conflicts show --json: %v\n%s", err, out)
	}
	// Without JetStream the rejected body is still shown, and why the
	// original is not.
	out, err = runOps(t, "conflicts", "show", id, "--database-url", db.URL)
	if err != nil || !strings.Contains(out, "original body: not shown: HOOKS not reachable") || !strings.Contains(out, string(rejected)) {
		t.Fatalf("conflicts show without NATS: %v\n%s", err, out)
	}
}
