package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// endpointReceiver answers code and counts the requests per webhook-id.
type endpointReceiver struct {
	code atomic.Int32
	mu   sync.Mutex
	got  map[string]int
}

func (r *endpointReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.got[req.Header.Get("webhook-id")]++
	r.mu.Unlock()
	w.WriteHeader(int(r.code.Load()))
}

func (r *endpointReceiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

// withEndpoint gives the API's operator actions endpoint partner (on
// events.orders.>, one attempt per delivery, posting to recv) and runs
// the delivery of it until the test ends.
func (e *apiEnv) withEndpoint(t *testing.T, recv *endpointReceiver) {
	t.Helper()
	hs := httptest.NewServer(recv)
	t.Cleanup(hs.Close)
	ep := delivery.Endpoint{Name: "partner", URL: hs.URL + "/hooks", Subjects: []string{"events.orders.>"},
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Retry: []time.Duration{0}, AllowPrivate: true}.WithDefaults()
	if err := ep.Validate(); err != nil {
		t.Fatal(err)
	}
	e.ops.Endpoints, e.ops.Sign = []delivery.Endpoint{ep}, verify.SignStandard
	if _, err := stream.Ensure(context.Background(), e.ns.JS, stream.EventsConfig(stream.Options{})); err != nil {
		t.Fatal(err)
	}
	m, err := delivery.NewManager(delivery.Options{Endpoints: e.ops.Endpoints, JS: e.ns.JS, Pool: e.db.Pool, Sign: verify.SignStandard,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("delivery: %v", err)
		}
	})
	// A new endpoint receives the events published after its durable
	// exists.
	hookbridgetest.Eventually(t, time.Minute, "the durable of partner", func() bool {
		_, err := e.ns.JS.Consumer(context.Background(), stream.Events, delivery.ConsumerName("partner"))
		return err == nil
	})
}

func (e *apiEnv) publishEvent(t *testing.T, id string) {
	t.Helper()
	msg := nats.NewMsg("events.orders.created")
	msg.Header.Set(nats.MsgIdHdr, id)
	msg.Header.Set("Content-Type", "application/json")
	msg.Data = []byte(`{"order_id":"1"}`)
	if _, err := e.ns.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// The endpoint routes against a running delivery and a real receiver: a
// failed delivery shows in the endpoint's view, the dead-letter list and
// the event's deliveries; a dry-run requeue changes nothing, a requeue
// delivers it once; disable and enable change what status shows; a test
// event reaches the receiver; a replay by id sends the event again (its
// dry run nothing); the actions are audited.
func TestAPIEndpoints(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	recv := &endpointReceiver{got: map[string]int{}}
	recv.code.Store(http.StatusInternalServerError)
	e.withEndpoint(t, recv)

	var list []ops.EndpointStatus
	e.mustCall(t, http.MethodGet, "/api/v1/endpoints", nil, http.StatusOK, &list)
	if len(list) != 1 || list[0].Name != "partner" || list[0].State != delivery.StateEnabled {
		t.Fatalf("GET /api/v1/endpoints: %+v", list)
	}
	e.mustCall(t, http.MethodGet, "/api/v1/endpoints/nope", nil, http.StatusNotFound, nil)

	e.publishEvent(t, "ord-1")
	e.db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE endpoint = 'partner' AND resolved_at IS NULL`)
	var view ops.EndpointView
	hookbridgetest.Eventually(t, time.Minute, "the endpoint's view lists the attempt", func() bool {
		e.mustCall(t, http.MethodGet, "/api/v1/endpoints/partner", nil, http.StatusOK, &view)
		return len(view.RecentAttempts) == 1
	})
	if view.DeadLetters != 1 || len(view.DeadLetterList) != 1 || view.RecentAttempts[0].StatusCode != 500 {
		t.Fatalf("GET /api/v1/endpoints/partner: %+v", view)
	}
	dl := view.DeadLetterList[0].ID
	var dls []ops.EndpointDeadLetter
	e.mustCall(t, http.MethodGet, "/api/v1/delivery-dead-letters?endpoint=partner", nil, http.StatusOK, &dls)
	if len(dls) != 1 || dls[0].ID != dl || dls[0].LastStatus != 500 {
		t.Fatalf("GET /api/v1/delivery-dead-letters: %+v", dls)
	}

	var res ops.EndpointTriageResult
	e.mustCall(t, http.MethodPost, "/api/v1/delivery-dead-letters/requeue", map[string]any{"endpoint": "partner", "dry_run": true}, http.StatusOK, &res)
	if res.Matched != 1 || len(res.Done) != 1 || !res.DryRun {
		t.Fatalf("requeue dry run: %+v", res)
	}
	e.db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE resolved_at IS NULL`)
	e.mustCall(t, http.MethodPost, "/api/v1/delivery-dead-letters/discard", map[string]any{}, http.StatusBadRequest, nil)

	recv.code.Store(http.StatusNoContent)
	res = ops.EndpointTriageResult{}
	e.mustCall(t, http.MethodPost, "/api/v1/delivery-dead-letters/requeue", map[string]any{"ids": []int64{dl}}, http.StatusOK, &res)
	if res.Matched != 1 || len(res.Done) != 1 || res.Done[0] != dl || res.DryRun {
		t.Fatalf("requeue: %+v", res)
	}
	hookbridgetest.Eventually(t, time.Minute, "the requeued delivery arrives", func() bool { return recv.count("ord-1") == 2 })
	var hist ops.DeliveryHistory
	hookbridgetest.Eventually(t, time.Minute, "the event's deliveries say delivered", func() bool {
		e.mustCall(t, http.MethodGet, "/api/v1/deliveries/ord-1", nil, http.StatusOK, &hist)
		return len(hist.Endpoints) == 1 && hist.Endpoints[0].State == ops.DeliveryDelivered
	})
	e.mustCall(t, http.MethodGet, "/api/v1/deliveries/unknown", nil, http.StatusNotFound, nil)

	var change ops.EndpointChange
	e.mustCall(t, http.MethodPost, "/api/v1/endpoints/partner/disable", map[string]any{"reason": "maintenance"}, http.StatusOK, &change)
	if change.State != delivery.StateDisabled || !change.Changed {
		t.Fatalf("disable: %+v", change)
	}
	var st ops.Status
	e.mustCall(t, http.MethodGet, "/api/v1/status", nil, http.StatusOK, &st)
	if len(st.Endpoints) != 1 || st.Endpoints[0].State != delivery.StateDisabled || st.Endpoints[0].DisabledReason != "maintenance" {
		t.Fatalf("status after disable: %+v", st.Endpoints)
	}
	e.mustCall(t, http.MethodPost, "/api/v1/endpoints/partner/enable", map[string]any{}, http.StatusOK, &change)
	if change.State != delivery.StateEnabled || !change.Changed {
		t.Fatalf("enable: %+v", change)
	}

	var tr ops.TestResult
	e.mustCall(t, http.MethodPost, "/api/v1/endpoints/partner/test", map[string]any{}, http.StatusOK, &tr)
	if !tr.Success || tr.Status != http.StatusNoContent || recv.count(tr.EventID) != 1 {
		t.Fatalf("test: %+v, received %d", tr, recv.count(tr.EventID))
	}

	var rep ops.EndpointReplayResult
	e.mustCall(t, http.MethodPost, "/api/v1/endpoints/partner/replay", map[string]any{"event_ids": []string{"ord-1"}, "dry_run": true}, http.StatusOK, &rep)
	if rep.Matched != 1 || rep.Queued != 0 || !rep.DryRun {
		t.Fatalf("replay dry run: %+v", rep)
	}
	e.mustCall(t, http.MethodPost, "/api/v1/endpoints/partner/replay", map[string]any{}, http.StatusBadRequest, nil)
	rep = ops.EndpointReplayResult{}
	e.mustCall(t, http.MethodPost, "/api/v1/endpoints/partner/replay", map[string]any{"event_ids": []string{"ord-1"}}, http.StatusOK, &rep)
	if rep.Matched != 1 || rep.Queued != 1 {
		t.Fatalf("replay: %+v", rep)
	}
	hookbridgetest.Eventually(t, time.Minute, "the replayed event arrives", func() bool { return recv.count("ord-1") == 3 })
	if n := recv.count("ord-1"); n != 3 {
		t.Fatalf("the receiver got ord-1 %d times, want 3", n)
	}
	for _, action := range []string{"endpoint.disable", "endpoint.enable", "endpoint.test", "endpoint.replay", "delivery-dead-letter.requeue"} {
		if !strings.Contains(e.log.String(), `"action":"`+action+`"`) {
			t.Errorf("no audit line for %s", action)
		}
	}
}
