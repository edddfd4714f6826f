package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/admin"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/opsfor"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

const apiToken = "test-admin-token-0123456789"

// apiEnv is an admin API over a database and a JetStream server of the
// test's own, with the demo configuration (consumer "orders").
type apiEnv struct {
	db  *hookbridgetest.Database
	ns  *hookbridgetest.JetStream
	ops *ops.Ops
	srv *httptest.Server
	log *bytes.Buffer
}

func newAPIEnv(t *testing.T) *apiEnv {
	t.Helper()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	handlers := builtin.Handlers()
	cfg, err := app.Load("", func(string) (string, bool) { return "", false }, app.Overrides{DatabaseURL: db.URL}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	o, err := opsfor.New(cfg, handlers, db.Pool, ns.JS, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	h, err := admin.New(admin.Options{
		Ops: o, Token: apiToken, Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logBuf}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return &apiEnv{db: db, ns: ns, ops: o, srv: srv, log: &logBuf}
}

// syncWriter is a writer the handler's goroutines may share.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// call sends a request with the token (and a JSON body for POST) and
// decodes the JSON answer into out (when not nil); it returns the status.
func (e *apiEnv) call(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	return e.do(t, req, out)
}

func (e *apiEnv) do(t *testing.T, req *http.Request, out any) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, body %s", req.Method, req.URL.Path, ct, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", req.Method, req.URL.Path, b, err)
		}
	}
	return resp.StatusCode
}

func (e *apiEnv) mustCall(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	var raw json.RawMessage
	got := e.call(t, method, path, body, &raw)
	if got != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
}

// deadPaid publishes a payment for an order that does not exist yet and
// records it dead-lettered, as the consumer would after max_deliver.
func (e *apiEnv) deadPaid(t *testing.T, eventID, orderID string) (seq uint64, id int64) {
	t.Helper()
	seq = e.ns.PublishHook(t, "demo", eventID, orders.Paid, orders.WebhookBody(orders.Paid, orderID, 100))
	err := engine.RecordDeadLetter(context.Background(), e.db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo",
		EventID: eventID, EventType: orders.Paid, StreamSeq: seq, Deliveries: 5, Reason: engine.ReasonMaxDeliver,
		LastError: "unknown order", Body: orders.WebhookBody(orders.Paid, orderID, 100)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT id FROM hookbridge.dead_letters WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return seq, id
}

// apply replays one stored event to the orders consumer, as its delivery would.
func (e *apiEnv) apply(t *testing.T, eventID string) {
	t.Helper()
	sum, err := e.ops.Replay(context.Background(), "orders", ops.ReplaySelectors{EventID: eventID}, nil)
	if err != nil || sum.Processed+sum.Duplicate != 1 {
		t.Fatalf("apply %s: %+v, %v", eventID, sum, err)
	}
}

func TestAPIRequiresToken(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	_, dl := e.deadPaid(t, "p1", "o1")
	endpoints := []struct{ method, path string }{
		{"GET", "/api/v1/status"}, {"GET", "/api/v1/dead-letters"}, {"GET", fmt.Sprintf("/api/v1/dead-letters/%d", dl)},
		{"POST", fmt.Sprintf("/api/v1/dead-letters/%d/requeue", dl)}, {"POST", fmt.Sprintf("/api/v1/dead-letters/%d/discard", dl)},
		{"GET", "/api/v1/conflicts"}, {"GET", "/api/v1/conflicts/1"}, {"POST", "/api/v1/conflicts/1/resolve"},
		{"GET", "/api/v1/outbox?state=dead"}, {"POST", "/api/v1/outbox/1/requeue"}, {"POST", "/api/v1/replay"},
		{"GET", "/api/v1/replay/x"}, {"GET", "/api/v1/events/demo/p1"}, {"POST", "/api/v1/consumers/orders/pause"},
		{"POST", "/api/v1/consumers/orders/resume"}, {"GET", "/api/v1/nothing-here"},
	}
	for _, ep := range endpoints {
		for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + apiToken, apiToken} {
			req, err := http.NewRequest(ep.method, e.srv.URL+ep.path, strings.NewReader(`{"reason":"x","resolution":"x","consumer":"orders"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			var body struct{ Error string }
			if got := e.do(t, req, &body); got != http.StatusUnauthorized || body.Error == "" {
				t.Errorf("%s %s with Authorization %q: status %d, error %q; want 401 with an error", ep.method, ep.path, auth, got, body.Error)
			}
		}
	}
	// Nothing changed: the dead letter is still there, unresolved.
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL`); n != 1 {
		t.Fatalf("unresolved dead letters after refused requests = %d, want 1", n)
	}
	// And the right token opens it.
	var st ops.Status
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if st.DeadLettersUnresolved != 1 {
		t.Fatalf("status dead_letters_unresolved = %d, want 1", st.DeadLettersUnresolved)
	}
}

func TestAPIRefusesCrossSitePosts(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	_, dl := e.deadPaid(t, "p1", "o1")
	path := fmt.Sprintf("%s/api/v1/dead-letters/%d/discard", e.srv.URL, dl)
	for _, c := range []struct {
		name, contentType, origin, fetchSite string
	}{
		{"form post", "application/x-www-form-urlencoded", "", ""},
		{"multipart form post", "multipart/form-data; boundary=x", "", ""},
		{"text/plain post", "text/plain", "", ""},
		{"no content type", "", "", ""},
		{"foreign origin", "application/json", "https://evil.example", ""},
		{"foreign port", "application/json", "http://127.0.0.1:1", ""},
		{"null origin", "application/json", "null", ""},
		{"cross-site fetch", "application/json", "", "cross-site"},
	} {
		req, err := http.NewRequest("POST", path, strings.NewReader(`{"reason":"cross-site"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiToken) // even with the token
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.fetchSite != "" {
			req.Header.Set("Sec-Fetch-Site", c.fetchSite)
		}
		var body struct{ Error string }
		if got := e.do(t, req, &body); got != http.StatusForbidden || body.Error == "" {
			t.Errorf("%s: status %d, error %q; want 403", c.name, got, body.Error)
		}
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL`); n != 1 {
		t.Fatalf("unresolved dead letters after cross-site posts = %d, want 1", n)
	}
	// The console's own requests (same origin) go through.
	req, err := http.NewRequest("POST", path, strings.NewReader(`{"reason":"same origin"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Origin", e.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if got := e.do(t, req, nil); got != http.StatusOK {
		t.Fatalf("same-origin post: status %d", got)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolution = 'discarded' AND resolution_note = 'same origin'`); n != 1 {
		t.Fatalf("discarded rows = %d, want 1", n)
	}
}

// A dead letter whose cause is fixed (its order now exists) is applied
// once by a requeue, through the stream and the inbox; a second requeue
// changes nothing.
func TestRequeueDeadLetterAfterFixAppliesOnce(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	created := e.ns.PublishHook(t, "demo", "c1", orders.Created, orders.WebhookBody(orders.Created, "o1", 100))
	_ = created
	seq, dl := e.deadPaid(t, "p1", "o1")
	paid := func() int {
		return e.db.Count(t, `SELECT count(*) FROM demo.orders WHERE order_id = 'o1' AND status = 'paid'`)
	}
	inbox := func() int { return e.db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'p1'`) }
	reqPath := fmt.Sprintf("/api/v1/dead-letters/%d/requeue", dl)

	// The cause is not fixed yet: the order does not exist. The requeue
	// fails, the row stays unresolved with the new error.
	var failed struct{ Error string }
	e.mustCall(t, "POST", reqPath, map[string]any{}, http.StatusConflict, &failed)
	if !strings.Contains(failed.Error, "unknown order") {
		t.Fatalf("failed requeue error = %q", failed.Error)
	}
	if paid() != 0 || inbox() != 0 {
		t.Fatalf("after a failed requeue: paid %d, inbox %d; want 0, 0", paid(), inbox())
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolved_at IS NULL AND last_error LIKE 'replay:%'`, dl); n != 1 {
		t.Fatal("the failed requeue did not leave the row unresolved with its error")
	}

	// Fix the cause: the order is created.
	e.apply(t, "c1")
	var res ops.RequeueResult
	e.mustCall(t, "POST", reqPath, map[string]any{}, http.StatusOK, &res)
	if res.Status != ops.StatusRequeued || res.StreamSeq != seq || res.ID != dl {
		t.Fatalf("requeue = %+v, want requeued at seq %d", res, seq)
	}
	if paid() != 1 || inbox() != 1 {
		t.Fatalf("after the requeue: paid %d, inbox %d; want 1, 1", paid(), inbox())
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE event_id = $1`, publisher.DerivedID("orders", "demo", "p1")); n != 1 {
		t.Fatalf("outbox rows of the paid event = %d, want 1", n)
	}
	var dlv struct {
		ResolvedAt *time.Time `json:"resolved_at"`
		Resolution *string    `json:"resolution"`
		Body       *string    `json:"body"`
	}
	e.mustCall(t, "GET", fmt.Sprintf("/api/v1/dead-letters/%d", dl), nil, http.StatusOK, &dlv)
	if dlv.ResolvedAt == nil || dlv.Resolution == nil || *dlv.Resolution != engine.ResolutionRequeued || dlv.Body == nil || !strings.Contains(*dlv.Body, `"o1"`) {
		t.Fatalf("dead letter after requeue = %+v", dlv)
	}

	// A second requeue changes nothing.
	msgs := e.ns.StreamMsgs(t, stream.Hooks)
	e.mustCall(t, "POST", reqPath, map[string]any{}, http.StatusOK, &res)
	if res.Status != ops.StatusAlreadyResolved {
		t.Fatalf("second requeue = %+v, want already_resolved", res)
	}
	if paid() != 1 || inbox() != 1 || e.ns.StreamMsgs(t, stream.Hooks) != msgs {
		t.Fatalf("after a second requeue: paid %d, inbox %d, HOOKS %d (was %d)", paid(), inbox(), e.ns.StreamMsgs(t, stream.Hooks), msgs)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 2 { // created + paid
		t.Fatalf("outbox rows = %d, want 2", n)
	}
	if !strings.Contains(e.log.String(), `"action":"dead-letter.requeue"`) || strings.Contains(e.log.String(), apiToken) {
		t.Fatalf("audit log missing the requeue or holding the token:\n%s", e.log.String())
	}
	e.mustCall(t, "POST", "/api/v1/dead-letters/999999/requeue", map[string]any{}, http.StatusNotFound, nil)
}

func TestDeadLetterListAndDiscard(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	_, dl1 := e.deadPaid(t, "p1", "o1")
	_, dl2 := e.deadPaid(t, "p2", "o2")
	_, dl3 := e.deadPaid(t, "p3", "o3")

	type page struct {
		Items []struct {
			ID       int64  `json:"id"`
			EventID  string `json:"event_id"`
			Consumer string `json:"consumer"`
			Body     *string
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	var p page
	e.mustCall(t, "GET", "/api/v1/dead-letters?limit=2", nil, http.StatusOK, &p)
	if len(p.Items) != 2 || p.Items[0].ID != dl3 || p.Items[1].ID != dl2 || p.NextCursor == nil || p.Items[0].Body != nil {
		t.Fatalf("first page = %+v", p)
	}
	e.mustCall(t, "GET", "/api/v1/dead-letters?limit=2&cursor="+*p.NextCursor, nil, http.StatusOK, &p)
	if len(p.Items) != 1 || p.Items[0].ID != dl1 || p.NextCursor != nil {
		t.Fatalf("second page = %+v", p)
	}
	e.mustCall(t, "GET", "/api/v1/dead-letters?limit=501", nil, http.StatusBadRequest, nil)
	e.mustCall(t, "GET", "/api/v1/dead-letters?resolved=maybe", nil, http.StatusBadRequest, nil)

	discard := fmt.Sprintf("/api/v1/dead-letters/%d/discard", dl2)
	e.mustCall(t, "POST", discard, map[string]any{}, http.StatusBadRequest, nil) // a reason is required
	var res struct {
		ID     int64
		Status string
	}
	e.mustCall(t, "POST", discard, map[string]any{"reason": "test order, never existed"}, http.StatusOK, &res)
	if res.Status != ops.StatusDiscarded || res.ID != dl2 {
		t.Fatalf("discard = %+v", res)
	}
	e.mustCall(t, "POST", discard, map[string]any{"reason": "again"}, http.StatusOK, &res)
	if res.Status != ops.StatusAlreadyResolved {
		t.Fatalf("second discard = %+v", res)
	}
	// Kept, marked with the first reason; never applied.
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolution = 'discarded' AND resolution_note = 'test order, never existed'`, dl2); n != 1 {
		t.Fatal("discarded row not kept with its reason")
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.inbox`); n != 0 {
		t.Fatalf("inbox rows = %d after a discard, want 0", n)
	}
	// A discarded dead letter is not requeued.
	var rq ops.RequeueResult
	e.mustCall(t, "POST", fmt.Sprintf("/api/v1/dead-letters/%d/requeue", dl2), map[string]any{}, http.StatusOK, &rq)
	if rq.Status != ops.StatusAlreadyResolved {
		t.Fatalf("requeue of a discarded row = %+v", rq)
	}
	e.mustCall(t, "GET", "/api/v1/dead-letters", nil, http.StatusOK, &p)
	if len(p.Items) != 2 {
		t.Fatalf("unresolved list has %d items, want 2", len(p.Items))
	}
	e.mustCall(t, "GET", "/api/v1/dead-letters?resolved=true", nil, http.StatusOK, &p)
	if len(p.Items) != 1 || p.Items[0].ID != dl2 {
		t.Fatalf("resolved list = %+v", p)
	}
	e.mustCall(t, "GET", "/api/v1/dead-letters?resolved=all&consumer=orders&type="+orders.Paid, nil, http.StatusOK, &p)
	if len(p.Items) != 3 {
		t.Fatalf("all list has %d items, want 3", len(p.Items))
	}
	e.mustCall(t, "GET", "/api/v1/dead-letters?resolved=all&consumer=nobody", nil, http.StatusOK, &p)
	if len(p.Items) != 0 || p.Items == nil {
		t.Fatalf("list for another consumer = %+v, want an empty list", p)
	}
}

func TestConflictShowAndResolve(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	original := orders.WebhookBody(orders.Created, "o1", 100)
	origSeq := e.ns.PublishHook(t, "demo", "c1", orders.Created, original)
	e.apply(t, "c1")
	rejected := []byte{0xff, 0xfe, 'x'} // not UTF-8: answered as base64
	if err := store.ConflictInsert(context.Background(), e.db.Pool, store.Conflict{DetectedBy: "orders", Source: "demo", EventID: "c1",
		EventType: orders.Created, RejectedSeq: 99, RejectedBody: rejected}); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			ID          int64  `json:"id"`
			DetectedBy  string `json:"detected_by"`
			RejectedSeq uint64 `json:"rejected_seq"`
		} `json:"items"`
	}
	e.mustCall(t, "GET", "/api/v1/conflicts", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].DetectedBy != "orders" || list.Items[0].RejectedSeq != 99 {
		t.Fatalf("conflicts = %+v", list)
	}
	id := list.Items[0].ID
	var detail struct {
		OriginalBody       *string `json:"original_body"`
		RejectedBody       *string `json:"rejected_body"`
		RejectedBodyBase64 []byte  `json:"rejected_body_base64"`
		OriginalSeq        uint64  `json:"original_seq"`
	}
	e.mustCall(t, "GET", fmt.Sprintf("/api/v1/conflicts/%d", id), nil, http.StatusOK, &detail)
	if detail.OriginalBody == nil || *detail.OriginalBody != string(original) || detail.RejectedBody != nil || !bytes.Equal(detail.RejectedBodyBase64, rejected) {
		t.Fatalf("conflict detail = %+v (original at seq %d)", detail, origSeq)
	}
	path := fmt.Sprintf("/api/v1/conflicts/%d/resolve", id)
	e.mustCall(t, "POST", path, map[string]any{"resolution": ""}, http.StatusBadRequest, nil)
	var res struct{ Status string }
	e.mustCall(t, "POST", path, map[string]any{"resolution": "sender bug; original kept"}, http.StatusOK, &res)
	if res.Status != ops.StatusResolved {
		t.Fatalf("resolve = %+v", res)
	}
	e.mustCall(t, "POST", path, map[string]any{"resolution": "again"}, http.StatusOK, &res)
	if res.Status != ops.StatusAlreadyResolved {
		t.Fatalf("second resolve = %+v", res)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.conflicts WHERE resolved_at IS NOT NULL AND resolution = 'sender bug; original kept'`); n != 1 {
		t.Fatal("conflict not resolved with the first resolution")
	}
	e.mustCall(t, "GET", "/api/v1/conflicts", nil, http.StatusOK, &list)
	if len(list.Items) != 0 {
		t.Fatalf("unresolved conflicts after resolve = %+v", list)
	}
	var st ops.Status
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if st.Conflicts != 1 || st.ConflictsUnresolved != 0 {
		t.Fatalf("status conflicts = %d, unresolved %d; want 1, 0", st.Conflicts, st.ConflictsUnresolved)
	}
	e.mustCall(t, "GET", "/api/v1/conflicts/12345", nil, http.StatusNotFound, nil)
	e.mustCall(t, "POST", "/api/v1/conflicts/12345/resolve", map[string]any{"resolution": "x"}, http.StatusNotFound, nil)
}

func TestOutboxListAndRequeue(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(ctx, tx,
			publisher.Message{ID: "out-1", Subject: "events.orders.paid", Payload: []byte(`{}`)},
			publisher.Message{ID: "out-2", Subject: "events.orders.paid", Payload: []byte(`{}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	var dead int64
	if err := e.db.Pool.QueryRow(ctx, `UPDATE hookbridge.outbox SET status = 'dead', attempts = 10, last_error = 'refused' WHERE event_id = 'out-1' RETURNING id`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			ID        int64  `json:"id"`
			EventID   string `json:"event_id"`
			Attempts  int    `json:"attempts"`
			LastError string `json:"last_error"`
		} `json:"items"`
	}
	e.mustCall(t, "GET", "/api/v1/outbox?state=dead", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].ID != dead || list.Items[0].Attempts != 10 || list.Items[0].LastError != "refused" {
		t.Fatalf("dead outbox = %+v", list)
	}
	e.mustCall(t, "GET", "/api/v1/outbox?state=pending", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].EventID != "out-2" {
		t.Fatalf("pending outbox = %+v", list)
	}
	e.mustCall(t, "GET", "/api/v1/outbox?state=sent", nil, http.StatusBadRequest, nil)

	var res struct{ Status string }
	path := fmt.Sprintf("/api/v1/outbox/%d/requeue", dead)
	e.mustCall(t, "POST", path, map[string]any{}, http.StatusOK, &res)
	if res.Status != ops.StatusRequeued {
		t.Fatalf("requeue = %+v", res)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE id = $1 AND status = 'pending' AND attempts = 0 AND next_attempt_at <= clock_timestamp()`, dead); n != 1 {
		t.Fatal("requeued row is not pending, due, with attempts reset")
	}
	e.mustCall(t, "POST", path, map[string]any{}, http.StatusOK, &res)
	if res.Status != ops.StatusNotDead {
		t.Fatalf("second requeue = %+v", res)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending'`); n != 2 {
		t.Fatalf("pending rows = %d, want 2", n)
	}
	e.mustCall(t, "POST", "/api/v1/outbox/424242/requeue", map[string]any{}, http.StatusNotFound, nil)
}

func TestReplayDryRunThenJob(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	for i := 1; i <= 3; i++ {
		e.ns.PublishHook(t, "demo", fmt.Sprintf("c%d", i), orders.Created, orders.WebhookBody(orders.Created, fmt.Sprintf("o%d", i), 100))
	}
	e.ns.PublishHook(t, "demo", "p1", orders.Paid, orders.WebhookBody(orders.Paid, "o1", 100))
	e.apply(t, "c1")

	var dry struct {
		DryRun  bool             `json:"dry_run"`
		Summary ops.ReplayResult `json:"summary"`
		Items   []struct {
			StreamSeq uint64 `json:"stream_seq"`
			EventID   string `json:"event_id"`
			EventType string `json:"event_type"`
		} `json:"items"`
	}
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders", "from_seq": 1}, http.StatusOK, &dry)
	if !dry.DryRun || !dry.Summary.DryRun || dry.Summary.Selected != 4 || dry.Summary.ByType[orders.Created] != 3 || dry.Summary.ByType[orders.Paid] != 1 ||
		dry.Summary.New != 3 || dry.Summary.Duplicate != 1 || len(dry.Items) != 4 || dry.Items[0].EventID != "c1" {
		t.Fatalf("dry run = %+v", dry)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.inbox`); n != 1 {
		t.Fatalf("inbox rows after a dry run = %d, want 1", n)
	}
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "nobody"}, http.StatusNotFound, nil)
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders", "from_seq": 5, "to_seq": 2}, http.StatusBadRequest, nil)
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders", "since": "yesterday"}, http.StatusBadRequest, nil)
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders", "bogus": 1}, http.StatusBadRequest, nil)

	var job struct {
		JobID string `json:"job_id"`
	}
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders", "from_seq": 1, "dry_run": false}, http.StatusAccepted, &job)
	var st struct {
		State   string            `json:"state"`
		Done    int               `json:"done"`
		Total   uint64            `json:"total"`
		Error   string            `json:"error"`
		Summary *ops.ReplayResult `json:"summary"`
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "replay job to end", func() bool {
		e.mustCall(t, "GET", "/api/v1/replay/"+job.JobID, nil, http.StatusOK, &st)
		return st.State != "running"
	})
	if st.State != "done" || st.Done != 4 || st.Total != 4 || st.Error != "" || st.Summary == nil || st.Summary.Selected != 4 ||
		st.Summary.Processed != 3 || st.Summary.Duplicate != 1 || st.Summary.Held != 0 {
		t.Fatalf("job = %+v", st)
	}
	if !strings.Contains(e.log.String(), `"msg":"admin replay ended","job_id":"`+job.JobID+`"`) || !strings.Contains(e.log.String(), `"held":0,`) {
		t.Fatalf("the job's end is not logged with what was held:\n%s", e.log.String())
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.inbox`); n != 4 {
		t.Fatalf("inbox rows after the replay = %d, want 4", n)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM demo.orders`); n != 3 {
		t.Fatalf("orders after the replay = %d, want 3", n)
	}
	e.mustCall(t, "GET", "/api/v1/replay/nope", nil, http.StatusNotFound, nil)
}

// A dry run marks the messages that are unresolved dead letters, which
// the inbox alone calls new, with the dead letter and what the real run
// does with them.
func TestReplayDryRunNamesDeadLetters(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	e.ns.PublishHook(t, "demo", "c1", orders.Created, orders.WebhookBody(orders.Created, "o1", 100))
	_, dl := e.deadPaid(t, "p-dead", "o-missing")
	var dry struct {
		Summary struct {
			New            int `json:"new"`
			NewDeadLetters int `json:"new_dead_letters"`
		} `json:"summary"`
		Items []struct {
			EventID      string `json:"event_id"`
			Outcome      string `json:"outcome"`
			DeadLetterID int64  `json:"dead_letter_id"`
			Note         string `json:"note"`
		} `json:"items"`
	}
	e.mustCall(t, "POST", "/api/v1/replay", map[string]any{"consumer": "orders"}, http.StatusOK, &dry)
	if dry.Summary.New != 2 || dry.Summary.NewDeadLetters != 1 || len(dry.Items) != 2 {
		t.Fatalf("dry run = %+v", dry)
	}
	if it := dry.Items[0]; it.EventID != "c1" || it.DeadLetterID != 0 || it.Note != "" {
		t.Fatalf("item c1 = %+v", it)
	}
	if it := dry.Items[1]; it.EventID != "p-dead" || it.Outcome != "new" || it.DeadLetterID != dl || !strings.Contains(it.Note, "the real run applies it again") {
		t.Fatalf("item p-dead = %+v", it)
	}
}

// The overview names the events failing right now with their failure
// counts and last errors, and each stream's reach back for a replay is
// its oldest stored message; an event's life gives its failures too.
// Once its handler postpones it, it is listed as postponed, failures and
// all, and no longer as failing.
func TestStatusNamesRetryingEventsAndReplayReach(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	seq := e.ns.PublishHook(t, "demo", "p-early", orders.Paid, orders.WebhookBody(orders.Paid, "o-late", 100))
	key := store.MessageKey{Source: "demo", EventID: "p-early", StreamSeq: seq}
	for range 2 {
		if _, err := store.FailureIncrement(context.Background(), e.db.Pool, "orders", key, "unknown order o-late"); err != nil {
			t.Fatal(err)
		}
	}
	var st ops.Status
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if len(st.Retrying) != 1 || st.RetryingByConsumer["orders"] != 1 {
		t.Fatalf("retrying = %+v, by consumer %v", st.Retrying, st.RetryingByConsumer)
	}
	if f := st.Retrying[0]; f.Consumer != "orders" || f.EventID != "p-early" || f.StreamSeq != seq || f.Failures != 2 ||
		f.LastError != "unknown order o-late" || f.LastFailedAt.IsZero() {
		t.Fatalf("retrying event = %+v", f)
	}
	var hooks *ops.StreamStatus
	for i := range st.Streams {
		if st.Streams[i].Name == stream.Hooks {
			hooks = &st.Streams[i]
		}
	}
	if hooks == nil || hooks.FirstSeq != seq || hooks.FirstTime == nil || time.Since(*hooks.FirstTime) > time.Hour {
		t.Fatalf("HOOKS = %+v, want its first message's sequence and time", hooks)
	}

	var life ops.EventLife
	e.mustCall(t, "GET", "/api/v1/events/demo/p-early", nil, http.StatusOK, &life)
	if len(life.Consumers) != 1 {
		t.Fatalf("consumers = %+v", life.Consumers)
	}
	if c := life.Consumers[0]; c.State != ops.EventRedelivered || c.Failures != 2 || c.LastError != "unknown order o-late" || c.LastFailedAt == nil ||
		c.PostponedSince != nil {
		t.Fatalf("at orders = %+v", c)
	}

	// Its handler then postpones it: it is no longer failing but waiting
	// for a later event of its key, with the failures it had, in status
	// and in its life alike.
	since, err := store.FailurePostpone(context.Background(), e.db.Pool, "orders", key, "", "needs its order.created", nil)
	if err != nil {
		t.Fatal(err)
	}
	st = ops.Status{}
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if len(st.Retrying) != 0 || st.RetryingByConsumer["orders"] != 0 || len(st.Postponed) != 1 || st.PostponedByConsumer["orders"] != 1 {
		t.Fatalf("retrying = %+v %v, postponed %+v %v; want it postponed only", st.Retrying, st.RetryingByConsumer, st.Postponed, st.PostponedByConsumer)
	}
	if f := st.Postponed[0]; f.EventID != "p-early" || f.Failures != 2 || f.PostponedSince == nil || !f.PostponedSince.Equal(since) {
		t.Fatalf("postponed event = %+v, want its 2 failures and the time it was postponed, %s", f, since)
	}
	e.mustCall(t, "GET", "/api/v1/events/demo/p-early", nil, http.StatusOK, &life)
	if c := life.Consumers[0]; c.State != ops.EventPostponed || c.Failures != 2 || c.PostponedSince == nil || !c.PostponedSince.Equal(since) {
		t.Fatalf("at orders once postponed = %+v, want postponed since %s with its 2 failures", c, since)
	}
}

func TestEventLife(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	cSeq := e.ns.PublishHook(t, "demo", "c1", orders.Created, orders.WebhookBody(orders.Created, "o1", 100))
	e.apply(t, "c1")
	pSeq, dl := e.deadPaid(t, "p9", "o9")
	xSeq := e.ns.PublishHook(t, "demo", "x1", orders.Cancelled, orders.WebhookBody(orders.Cancelled, "o1", 100))

	var life ops.EventLife
	e.mustCall(t, "GET", "/api/v1/events/demo/c1", nil, http.StatusOK, &life)
	if life.Stored == nil || life.Stored.Seq != cSeq || life.Stored.Subject != stream.HookSubject("demo", orders.Created) || life.Stored.ReceivedAt.IsZero() {
		t.Fatalf("stored = %+v", life.Stored)
	}
	if len(life.Consumers) != 1 || life.Consumers[0].Name != "orders" || life.Consumers[0].State != ops.EventProcessed ||
		life.Consumers[0].StreamSeq != cSeq || life.Consumers[0].ProcessedAt == nil {
		t.Fatalf("consumers = %+v", life.Consumers)
	}
	if len(life.Outbox) != 1 || life.Outbox[0].EventID != publisher.DerivedID("orders", "demo", "c1") || life.Outbox[0].State != "pending" {
		t.Fatalf("outbox = %+v", life.Outbox)
	}

	e.mustCall(t, "GET", "/api/v1/events/demo/p9", nil, http.StatusOK, &life)
	if life.Stored == nil || life.Stored.Seq != pSeq || len(life.Consumers) != 1 || life.Consumers[0].State != ops.EventDeadLettered ||
		life.Consumers[0].DeadLetterID == nil || *life.Consumers[0].DeadLetterID != dl || len(life.Outbox) != 0 {
		t.Fatalf("dead-lettered event = %+v", life)
	}
	if len(life.DeadLetters) != 1 || life.DeadLetters[0].ID != dl || life.DeadLetters[0].ResolvedAt != nil || len(life.Conflicts) != 0 {
		t.Fatalf("dead-lettered event's dead letters %+v, conflicts %+v", life.DeadLetters, life.Conflicts)
	}

	// Known to no table: found among the newest messages, pending.
	e.mustCall(t, "GET", "/api/v1/events/demo/x1", nil, http.StatusOK, &life)
	if life.Stored == nil || life.Stored.Seq != xSeq || len(life.Consumers) != 1 || life.Consumers[0].State != ops.EventPending {
		t.Fatalf("pending event = %+v", life)
	}
	e.mustCall(t, "GET", "/api/v1/events/demo/never-sent", nil, http.StatusNotFound, nil)
	// The lookup's ephemeral consumers are gone.
	s, err := e.ns.JS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	for name := range s.ConsumerNames(context.Background()).Name() {
		t.Errorf("consumer %s left on HOOKS", name)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	e.mustCall(t, "POST", "/api/v1/consumers/orders/pause", map[string]any{}, http.StatusNotFound, nil) // no durable yet
	if _, err := e.ns.JS.CreateConsumer(context.Background(), stream.Hooks, jetstream.ConsumerConfig{Durable: "orders", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	var res ops.PauseResult
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	e.mustCall(t, "POST", "/api/v1/consumers/orders/pause", map[string]any{"until": until}, http.StatusOK, &res)
	if !res.Paused || res.Until == nil || !res.Until.Equal(until) {
		t.Fatalf("pause = %+v", res)
	}
	info, err := e.ns.JS.Consumer(context.Background(), stream.Hooks, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if ci := info.CachedInfo(); !ci.Paused {
		t.Fatal("JetStream does not report the consumer paused")
	}
	var st ops.Status
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if len(st.Consumers) != 1 || !st.Consumers[0].Paused {
		t.Fatalf("status consumers = %+v", st.Consumers)
	}
	e.mustCall(t, "POST", "/api/v1/consumers/orders/resume", map[string]any{}, http.StatusOK, &res)
	if res.Paused {
		t.Fatalf("resume = %+v", res)
	}
	e.mustCall(t, "GET", "/api/v1/status", nil, http.StatusOK, &st)
	if st.Consumers[0].Paused {
		t.Fatal("status still shows the consumer paused")
	}
	e.mustCall(t, "POST", "/api/v1/consumers/orders/pause", map[string]any{"until": time.Now().Add(-time.Hour)}, http.StatusBadRequest, nil)
	e.mustCall(t, "POST", "/api/v1/consumers/nobody/pause", map[string]any{}, http.StatusNotFound, nil)
	// Without an end, it stays paused until resumed.
	e.mustCall(t, "POST", "/api/v1/consumers/orders/pause", map[string]any{}, http.StatusOK, &res)
	if !res.Paused || res.Until == nil || res.Until.Before(time.Now().AddDate(50, 0, 0)) {
		t.Fatalf("open-ended pause = %+v", res)
	}
}

func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A discarded dead letter's event was given up on for good: its life
// still shows it dead-lettered at the consumer, naming the row, rather
// than pending (or nothing at all once the consumer's ack floor passed it).
func TestEventLifeOfADiscardedDeadLetter(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	pSeq, dl := e.deadPaid(t, "p9", "o9")
	e.mustCall(t, "POST", fmt.Sprintf("/api/v1/dead-letters/%d/discard", dl), map[string]any{"reason": "test order"}, http.StatusOK, nil)
	check := func(when string) {
		t.Helper()
		var life ops.EventLife
		e.mustCall(t, "GET", "/api/v1/events/demo/p9", nil, http.StatusOK, &life)
		if len(life.Consumers) != 1 || life.Consumers[0].State != ops.EventDeadLettered || life.Consumers[0].StreamSeq != pSeq ||
			life.Consumers[0].DeadLetterID == nil || *life.Consumers[0].DeadLetterID != dl {
			t.Fatalf("%s: consumers = %+v, want orders dead_lettered with dead letter %d", when, life.Consumers, dl)
		}
	}
	check("no durable")
	// The running consumer terminated the message: its ack floor is past it.
	ctx := context.Background()
	c, err := e.ns.JS.CreateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: "orders", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Fetch(1, jetstream.FetchMaxWait(time.Minute)) // returns with the message
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		if err := m.TermWithReason("dead-lettered"); err != nil {
			t.Fatal(err)
		}
	}
	hookbridgetest.Eventually(t, time.Minute, "ack floor past the message", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream >= pSeq
	})
	check("acked")
}
