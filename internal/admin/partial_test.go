package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// failPromoteHeads makes the statement that makes requeued or replayed
// deliveries due fail in db (a trigger on its text), so that a requeue
// fails after its first statement committed.
func failPromoteHeads(t *testing.T, e *apiEnv) {
	t.Helper()
	_, err := e.db.Pool.Exec(context.Background(), `
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
}

// insertDeliveryDeadLetter writes an unresolved dead letter of an
// ordered endpoint's key and returns its id.
func insertDeliveryDeadLetter(t *testing.T, e *apiEnv, endpoint string, seq int64) int64 {
	t.Helper()
	var id int64
	err := e.db.Pool.QueryRow(context.Background(), `
INSERT INTO hookbridge.delivery_dead_letters (endpoint, event_id, subject, stream_seq, attempts, ordering_key, payload)
VALUES ($1, 'ev-' || $2::bigint, 'events.orders.paid', $2::bigint, 1, 's:events.orders.paid', '{}'::bytea) RETURNING id`, endpoint, seq).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A requeue whose second statement fails has requeued all the same: the
// API answers the error and, in "result", the dead letters it requeued,
// and the audit line names them.
func TestAPIRequeueThatFailsAfterRequeuingSaysWhich(t *testing.T) {
	e := newAPIEnv(t)
	e.ops.Endpoints = []delivery.Endpoint{{Name: "partner"}} // configured: a requeue may queue for it
	id := insertDeliveryDeadLetter(t, e, "partner", 7)
	failPromoteHeads(t, e)

	var got struct {
		Error  string                    `json:"error"`
		Result *ops.EndpointTriageResult `json:"result"`
	}
	code := e.call(t, http.MethodPost, "/api/v1/delivery-dead-letters/requeue", map[string]any{"ids": []int64{id}}, &got)
	if code != http.StatusInternalServerError || !strings.Contains(got.Error, "requeued 1") {
		t.Fatalf("requeue: status %d, error %q; want 500 naming the requeue", code, got.Error)
	}
	if got.Result == nil || !slices.Equal(got.Result.Done, []int64{id}) {
		t.Fatalf("requeue: result %+v, want done [%d]", got.Result, id)
	}
	// It was requeued indeed: one pending delivery, the dead letter resolved.
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.delivery_pending WHERE dead_letter_id = $1`, id); n != 1 {
		t.Fatalf("pending deliveries of the requeue: %d, want 1", n)
	}
	if !strings.Contains(e.log.String(), fmt.Sprintf(`"ids":[%d]`, id)) {
		t.Fatalf("the audit line does not name the requeued ids:\n%s", e.log.String())
	}
}
