package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A requeue whose second statement fails has requeued all the same:
// `endpoints dead-letters requeue` prints which before the error.
func TestEndpointsRequeueThatFailsAfterRequeuingSaysWhich(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ctx := context.Background()
	var id int64
	err := db.Pool.QueryRow(ctx, `
INSERT INTO hookbridge.delivery_dead_letters (endpoint, event_id, subject, stream_seq, attempts, ordering_key, payload)
VALUES ('partner', 'ev-7', 'events.orders.paid', 7, 1, 's:events.orders.paid', '{}'::bytea) RETURNING id`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	// The statement that makes requeued deliveries due fails (a trigger on
	// its text); the requeue's own statement has committed by then.
	_, err = db.Pool.Exec(ctx, `
CREATE FUNCTION hookbridge.fail_promote() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF current_query() LIKE '%AS k(endpoint, ordering_key)%' THEN
		RAISE EXCEPTION 'promote refused by the test';
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER fail_promote BEFORE UPDATE ON hookbridge.delivery_pending
	FOR EACH STATEMENT EXECUTE FUNCTION hookbridge.fail_promote();`)
	if err != nil {
		t.Fatal(err)
	}
	// partner is configured: a requeue may queue for it.
	path := filepath.Join(t.TempDir(), "hookbridge.yaml")
	yaml := `delivery:
  endpoints:
    - name: partner
      url: https://partner.example/hooks
      subjects: [events.orders.>]
      secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runOps(t, "endpoints", "dead-letters", "requeue", fmt.Sprint(id), "--config", path, "--database-url", db.URL)
	if err == nil || !strings.Contains(err.Error(), "requeued 1") {
		t.Fatalf("requeue: error %v, want one naming the requeue", err)
	}
	if want := fmt.Sprintf("1 requeued [%d]", id); !strings.Contains(out, want) {
		t.Fatalf("requeue printed %q, want it to say %q", out, want)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_pending WHERE dead_letter_id = $1`, id); n != 1 {
		t.Fatalf("pending deliveries of the requeue: %d, want 1", n)
	}
}
