package ops_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/store"
)

// An event's delivery history is grouped per endpoint, sorted by name,
// and names its state at each from what Postgres holds: delivered (the
// last attempt a 2xx), pending (a row in delivery_pending), dead_lettered
// (an unresolved dead letter), failed (its dead letter discarded) or
// in_flight (a failed attempt and nothing else). Another event's rows
// are not in it, and an event no endpoint has heard of has no endpoints.
func TestDeliveryHistoryStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := hookbridgetest.Postgres(t)
	o := &ops.Ops{Pool: db.Pool}
	attempt := func(endpoint, eventID string, n, status int) {
		t.Helper()
		class := ""
		if status/100 != 2 {
			class = "status"
		}
		err := store.DeliveryAttemptInsert(ctx, db.Pool, store.DeliveryAttempt{Endpoint: endpoint, EventID: eventID, Subject: "events.x",
			StreamSeq: 7, Attempt: n, StatusCode: status, ErrorClass: class, Duration: 3 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
	}
	deadLetter := func(endpoint string) int64 {
		t.Helper()
		b := &pgx.Batch{}
		store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{Endpoint: endpoint, EventID: "e-1", Subject: "events.x", StreamSeq: 7,
			Attempts: 1, LastStatus: 500, LastErrorClass: "status", Payload: []byte(`{}`)})
		if err := db.Pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := db.Pool.QueryRow(ctx, `SELECT id FROM hookbridge.delivery_dead_letters WHERE endpoint = $1`, endpoint).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	attempt("a-delivered", "e-1", 1, 500)
	attempt("a-delivered", "e-1", 2, 204)
	attempt("b-pending", "e-1", 1, 500)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO hookbridge.delivery_pending (endpoint, stream_seq, event_id, subject, attempts, next_attempt_at, origin)
		VALUES ('b-pending', 7, 'e-1', 'events.x', 1, now() + interval '5 minutes', 'failed')`); err != nil {
		t.Fatal(err)
	}
	attempt("c-dead", "e-1", 1, 500)
	deadLetter("c-dead")
	attempt("d-discarded", "e-1", 1, 500)
	if _, err := store.DeliveryDeadLetterDiscard(ctx, db.Pool, []int64{deadLetter("d-discarded")}); err != nil {
		t.Fatal(err)
	}
	attempt("e-retrying", "e-1", 1, 503)
	attempt("a-delivered", "e-2", 1, 204) // another event

	h, err := o.DeliveryHistory(ctx, "e-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		endpoint, state string
		attempts        int
	}{
		{"a-delivered", ops.DeliveryDelivered, 2},
		{"b-pending", ops.DeliveryPending, 1},
		{"c-dead", ops.DeliveryDeadLettered, 1},
		{"d-discarded", ops.DeliveryFailed, 1},
		{"e-retrying", ops.DeliveryInFlight, 1},
	}
	if len(h.Endpoints) != len(want) {
		t.Fatalf("history has %d endpoints, want %d: %+v", len(h.Endpoints), len(want), h)
	}
	for i, w := range want {
		got := h.Endpoints[i]
		if got.Endpoint != w.endpoint || got.State != w.state || len(got.Attempts) != w.attempts {
			t.Errorf("endpoint %d: %s %s with %d attempts, want %s %s with %d", i, got.Endpoint, got.State, len(got.Attempts),
				w.endpoint, w.state, w.attempts)
		}
	}
	if h.Endpoints[1].Pending == nil || h.Endpoints[1].Pending.Origin != "failed" {
		t.Errorf("b-pending's pending row: %+v", h.Endpoints[1].Pending)
	}
	if c := h.Endpoints[2]; len(c.DeadLetters) != 1 || c.DeadLetters[0].LastStatus != 500 {
		t.Errorf("c-dead's dead letters: %+v", c.DeadLetters)
	}
	if got := ops.AttemptClass(h.Endpoints[0].Attempts[0]); got != "5xx" {
		t.Errorf("a 500's class is %q, want 5xx", got)
	}

	none, err := o.DeliveryHistory(ctx, "never-sent")
	if err != nil || len(none.Endpoints) != 0 {
		t.Fatalf("an unknown event's history: %+v, %v", none, err)
	}
	// An endpoint not configured is refused by name; a triage naming
	// nothing is refused as invalid.
	if _, err := o.Endpoint(ctx, "nope"); !errors.Is(err, ops.ErrNotFound) {
		t.Errorf("Endpoint(nope) = %v, want ErrNotFound", err)
	}
	if _, err := o.EndpointDeadLettersRequeue(ctx, ops.EndpointDeadLetterFilter{}, false, true); !errors.Is(err, ops.ErrInvalid) {
		t.Errorf("a requeue naming nothing = %v, want ErrInvalid", err)
	}
	// c-dead is configured nowhere (o has no endpoints): its dead letters
	// are listed and may be discarded by its name, not requeued.
	if list, err := o.EndpointDeadLetters(ctx, ops.EndpointDeadLetterFilter{Endpoint: "c-dead"}); err != nil || len(list) != 1 {
		t.Errorf("c-dead's dead letters: %+v, %v", list, err)
	}
	if _, err := o.EndpointDeadLettersRequeue(ctx, ops.EndpointDeadLetterFilter{Endpoint: "c-dead"}, false, true); !errors.Is(err, ops.ErrNotFound) {
		t.Errorf("a requeue to an endpoint not configured = %v, want ErrNotFound", err)
	}
	if res, err := o.EndpointDeadLettersDiscard(ctx, ops.EndpointDeadLetterFilter{Endpoint: "c-dead"}, true); err != nil || res.Matched != 1 || !res.DryRun {
		t.Errorf("a dry-run discard of c-dead's dead letters: %+v, %v", res, err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE resolved_at IS NULL`); n != 1 {
		t.Errorf("%d unresolved dead letters, want 1 (c-dead's)", n)
	}
}

// A requeue selected by event (or id, subject, time) leaves out the dead
// letters of an endpoint no longer configured: nothing would send the
// delivery it queued, and the dead letter would be resolved all the same.
// They stay unresolved, to be discarded; the configured endpoint's is
// requeued.
func TestRequeueLeavesOutEndpointsNotConfigured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := hookbridgetest.Postgres(t)
	o := &ops.Ops{Pool: db.Pool, Endpoints: []delivery.Endpoint{{Name: "kept"}}}
	ids := map[string]int64{}
	for i, endpoint := range []string{"kept", "gone"} {
		b := &pgx.Batch{}
		store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{Endpoint: endpoint, EventID: "e-9", Subject: "events.x", StreamSeq: uint64(7 + i),
			Attempts: 1, LastStatus: 500, LastErrorClass: "status", Payload: []byte(`{}`)})
		if err := db.Pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := db.Pool.QueryRow(ctx, `SELECT id FROM hookbridge.delivery_dead_letters WHERE endpoint = $1`, endpoint).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[endpoint] = id
	}
	res, err := o.EndpointDeadLettersRequeue(ctx, ops.EndpointDeadLetterFilter{EventID: "e-9"}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Done, []int64{ids["kept"]}) || !slices.Equal(res.NotConfigured, []int64{ids["gone"]}) || res.Matched != 2 {
		t.Fatalf("requeue of e-9: %+v, want kept's %d done and gone's %d not configured", res, ids["kept"], ids["gone"])
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_pending WHERE endpoint = 'gone'`); n != 0 {
		t.Errorf("%d deliveries queued for gone, which nothing reads; want 0", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE endpoint = 'gone' AND resolved_at IS NULL`); n != 1 {
		t.Errorf("gone's unresolved dead letters: %d, want 1 (to discard)", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_pending WHERE endpoint = 'kept' AND dead_letter_id = $1`, ids["kept"]); n != 1 {
		t.Errorf("kept's requeued deliveries: %d, want 1", n)
	}
}
