package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/store"
)

// deadCreated publishes a keyed order.created and records it
// dead-lettered with its ordering key; laterID, when set, is a later
// event of the key that applied and marked it passed.
func (e *apiEnv) deadCreated(t *testing.T, eventID, orderID, laterID string) (id int64, laterSeq uint64) {
	t.Helper()
	ctx := context.Background()
	seq := e.ns.PublishKeyedHook(t, "demo", eventID, orders.Created, orderID, orders.WebhookBody(orders.Created, orderID, 100))
	if err := engine.RecordDeadLetter(ctx, e.db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo", EventID: eventID,
		EventType: orders.Created, StreamSeq: seq, Deliveries: 1, Reason: engine.ReasonPermanent, LastError: "broken",
		OrderingKey: orderID}); err != nil {
		t.Fatal(err)
	}
	if laterID != "" {
		laterSeq = e.ns.PublishKeyedHook(t, "demo", laterID, orders.Paid, orderID, orders.WebhookBody(orders.Paid, orderID, 100))
		if err := store.DeadLetterMarkPassed(ctx, e.db.Pool, "orders", store.MessageKey{Source: "demo", EventID: eventID, StreamSeq: seq}, laterID, laterSeq); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.Pool.QueryRow(ctx, `SELECT id FROM hookbridge.dead_letters WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id, laterSeq
}

// The API refuses to requeue a dead letter a later event of its key has
// passed (409, audited, nothing applied) and names the override; with
// {"out_of_order": true} it applies and says so. The dead letter shows
// its key and what passed it; a dry run and a job of
// {"dead_letters": true} count and leave it alone.
func TestRequeuePassedDeadLetterAPI(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	dl, laterSeq := e.deadCreated(t, "c1", "o1", "u1")
	lone, _ := e.deadCreated(t, "c2", "o2", "")
	applied := func(order string) int {
		return e.db.Count(t, `SELECT count(*) FROM demo.orders WHERE order_id = $1`, order)
	}

	var view struct {
		OrderingKey *string       `json:"ordering_key"`
		PassedBy    *ops.PassedBy `json:"passed_by"`
	}
	e.mustCall(t, "GET", fmt.Sprintf("/api/v1/dead-letters/%d", dl), nil, http.StatusOK, &view)
	if view.OrderingKey == nil || *view.OrderingKey != "o1" || view.PassedBy == nil || view.PassedBy.EventID != "u1" || view.PassedBy.StreamSeq != laterSeq {
		t.Fatalf("dead letter view = %+v, want key o1 passed by u1 at seq %d", view, laterSeq)
	}

	var dry struct {
		Summary struct {
			NewDeadLetters    int `json:"new_dead_letters"`
			PassedDeadLetters int `json:"passed_dead_letters"`
		} `json:"summary"`
		Items []struct {
			EventID  string        `json:"event_id"`
			Skipped  bool          `json:"skipped"`
			PassedBy *ops.PassedBy `json:"passed_by"`
		} `json:"items"`
	}
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders", "dead_letters": true}, http.StatusOK, &dry)
	if dry.Summary.PassedDeadLetters != 1 || dry.Summary.NewDeadLetters != 1 || len(dry.Items) != 2 ||
		!dry.Items[0].Skipped || dry.Items[0].PassedBy == nil || dry.Items[1].Skipped {
		t.Fatalf("dry run = %+v, want c1 marked skipped (passed), c2 not", dry)
	}

	var failed struct{ Error string }
	e.mustCall(t, "POST", fmt.Sprintf("/api/v1/dead-letters/%d/requeue", dl), map[string]any{}, http.StatusConflict, &failed)
	if !strings.Contains(failed.Error, "u1") || !strings.Contains(failed.Error, fmt.Sprint("stream seq ", laterSeq)) ||
		!strings.Contains(failed.Error, `"out_of_order": true`) {
		t.Fatalf("refusal %q: want it to name u1, its sequence and the override", failed.Error)
	}
	if applied("o1") != 0 {
		t.Fatal("a refused requeue applied the event")
	}
	if !strings.Contains(e.log.String(), `"action":"dead-letter.requeue","target":"dead-letter/`+fmt.Sprint(dl)+`","result":"refused"`) {
		t.Fatalf("the refusal is not in the audit log:\n%s", e.log.String())
	}

	var job struct {
		JobID string `json:"job_id"`
	}
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders", "dead_letters": true, "dry_run": false}, http.StatusAccepted, &job)
	var st struct {
		State         string           `json:"state"`
		SkippedPassed int              `json:"skipped_passed"`
		Summary       ops.ReplayResult `json:"summary"`
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "replay job to end", func() bool {
		e.mustCall(t, "GET", "/api/v1/replay/"+job.JobID, nil, http.StatusOK, &st)
		return st.State != "running"
	})
	if st.State != "done" || st.Summary.Processed != 1 || st.SkippedPassed != 1 || len(st.Summary.SkippedPassed) != 1 || st.Summary.SkippedPassed[0].ID != dl {
		t.Fatalf("job = %+v, want c2 processed and c1 skipped", st)
	}
	if applied("o1") != 0 || applied("o2") != 1 {
		t.Fatalf("after the job o1 applied %d, o2 %d; want 0 and 1", applied("o1"), applied("o2"))
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolution = 'replayed'`, lone); n != 1 {
		t.Fatal("the unpassed dead letter is not resolved by the job")
	}

	var res ops.RequeueResult
	e.mustCall(t, "POST", fmt.Sprintf("/api/v1/dead-letters/%d/requeue", dl), map[string]any{"out_of_order": true}, http.StatusOK, &res)
	if res.Status != ops.StatusRequeued || !res.OutOfOrder || res.PassedBy == nil || res.PassedBy.EventID != "u1" || applied("o1") != 1 {
		t.Fatalf("requeue with out_of_order = %+v, o1 applied %d", res, applied("o1"))
	}
	audited := false
	for _, line := range strings.Split(e.log.String(), "\n") {
		audited = audited || (strings.Contains(line, `"result":"requeued"`) && strings.Contains(line, `"out_of_order":true`) &&
			strings.Contains(line, `"passed_by_event":"u1"`))
	}
	if !audited {
		t.Fatalf("the out-of-order requeue is not audited as such:\n%s", e.log.String())
	}
}
