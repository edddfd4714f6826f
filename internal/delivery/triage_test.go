package delivery_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// deadLettered runs e until each event is dead-lettered (the receiver
// refuses them while refuse is set) and returns their dead letters.
func deadLettered(t *testing.T, o *origin, rc *receiver, refuse *atomic.Bool, e delivery.Endpoint, evs ...event) []store.DeliveryDeadLetter {
	t.Helper()
	refuse.Store(true)
	rc.setFail(func(_ int, ev event) int {
		if refuse.Load() {
			return http.StatusBadGateway
		}
		return 0
	})
	o.enqueue(t, evs...)
	if n := o.db.AwaitCount(t, len(evs), "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE resolved_at IS NULL"); n != len(evs) {
		t.Fatalf("dead letters = %d, want %d", n, len(evs))
	}
	dls, err := store.DeliveryDeadLetterFind(context.Background(), o.db.Pool, store.DeliveryDeadLetterFilter{Endpoint: e.Name})
	if err != nil {
		t.Fatal(err)
	}
	return dls
}

// Seed failure point: a manual requeue of a dead letter delivers it once,
// with the same webhook-id, from the body the dead letter kept; a second
// requeue at the same time does nothing, and neither does one after.
func TestRequeueDeliversOnce(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	e := endpoint("partner", rc.url)
	o.start(t, e, nil)
	var refuse atomic.Bool
	dls := deadLettered(t, o, rc, &refuse, e, event{"order.created", "a", 1})
	d := dls[0]
	if !d.HasPayload {
		t.Fatalf("dead letter %+v keeps no body", d)
	}
	body, _, ok, err := store.DeliveryDeadLetterBody(context.Background(), o.db.Pool, d.ID)
	var ev event
	if err != nil || !ok || json.Unmarshal(body, &ev) != nil || ev.Key != "a" || ev.N != 1 {
		t.Fatalf("dead letter body %q %v %v", body, ok, err)
	}
	// EVENTS may trim the event: the dead letter is enough.
	st, err := o.js.JS.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(context.Background(), d.StreamSeq); err != nil {
		t.Fatal(err)
	}
	refuse.Store(false)
	before := len(rc.seen())

	var wg sync.WaitGroup
	var requeued atomic.Int32
	for range 2 {
		wg.Go(func() {
			res, err := delivery.Requeue(context.Background(), o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{IDs: []int64{d.ID}}})
			if err != nil {
				t.Error(err)
			}
			requeued.Add(int32(len(res.Done)))
		})
	}
	wg.Wait()
	if n := requeued.Load(); n != 1 {
		t.Fatalf("two concurrent requeues requeued %d times, want once", n)
	}
	eventually(t, "the requeue stored", func() bool { return rc.stored(t) == 1 })
	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE redelivered_at IS NOT NULL"); n != 1 {
		t.Fatal("the requeue's delivery is not recorded on the dead letter")
	}
	if res, err := delivery.Requeue(context.Background(), o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{IDs: []int64{d.ID}}}); err != nil || len(res.Done) != 0 {
		t.Fatalf("a requeue of a requeued dead letter: %+v %v, want nothing done", res, err)
	}
	log := rc.seen()[before:]
	if len(log) != 1 || log[0].id != d.EventID || log[0].status != "accepted" {
		t.Fatalf("after the requeues the receiver saw %+v, want one accepted request with webhook-id %s", log, d.EventID)
	}
	// The event's history: every attempt, the dead letter and its requeue.
	if n := o.db.AwaitCount(t, len(e.Retry)+1, "SELECT count(*) FROM hookbridge.delivery_attempts"); n != len(e.Retry)+1 {
		t.Fatalf("attempt rows = %d, want %d", n, len(e.Retry)+1)
	}
	h, err := delivery.EventHistory(context.Background(), o.db.Pool, d.EventID)
	if err != nil || len(h.Attempts) != len(e.Retry)+1 || len(h.DeadLetters) != 1 || h.DeadLetters[0].Resolution != "requeued" ||
		h.DeadLetters[0].Requeues != 1 || len(h.Pending) != 0 {
		t.Fatalf("history %+v %v", h, err)
	}
	if n := o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_pending"); n != 0 {
		t.Fatalf("%d pending rows left", n)
	}
}

// Requeue by filter and discard; a dry run changes nothing.
func TestRequeueAndDiscardByFilter(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	e := endpoint("partner", rc.url)
	o.start(t, e, nil)
	var refuse atomic.Bool
	dls := deadLettered(t, o, rc, &refuse, e, event{"order.created", "a", 1}, event{"order.created", "b", 1}, event{"order.created", "c", 1})
	refuse.Store(false)
	ctx := context.Background()
	if _, err := delivery.Requeue(ctx, o.db.Pool, delivery.RequeueOptions{}); err == nil {
		t.Fatal("a requeue that names nothing must be refused")
	}
	dry, err := delivery.Requeue(ctx, o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{Endpoint: e.Name}, DryRun: true})
	if err != nil || dry.Matched != 3 || len(dry.Done) != 3 {
		t.Fatalf("dry run %+v %v", dry, err)
	}
	gone, err := delivery.Discard(ctx, o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{EventID: dls[2].EventID}})
	if err != nil || len(gone.Done) != 1 {
		t.Fatalf("discard %+v %v", gone, err)
	}
	res, err := delivery.Requeue(ctx, o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{Endpoint: e.Name}})
	if err != nil || res.Matched != 2 || len(res.Done) != 2 {
		t.Fatalf("requeue %+v %v, want the two not discarded", res, err)
	}
	eventually(t, "two requeues stored", func() bool { return rc.stored(t) == 2 })
	if n := o.db.AwaitCount(t, 2, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE resolution = 'requeued' AND redelivered_at IS NOT NULL"); n != 2 {
		t.Fatalf("requeues delivered = %d, want 2", n)
	}
	if n := o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE resolution = 'discarded'"); n != 1 {
		t.Fatalf("discarded = %d, want 1", n)
	}
}

// On an ordered endpoint a dead letter passed by a later event of its key
// is requeued only out of order; one not passed yet goes before the later
// events of its key.
func TestOrderedRequeueNeedsOutOfOrderOncePassed(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	e := endpoint("partner", rc.url)
	e.Ordered = true
	e.Retry = []time.Duration{0} // one attempt, then the dead letter
	o.start(t, e, nil)
	var refuse atomic.Bool
	dls := deadLettered(t, o, rc, &refuse, e, event{"order.created", "a", 1}, event{"order.created", "b", 1})
	refuse.Store(false)
	// a2 passes a1's dead letter; b's stays unpassed.
	o.enqueue(t, event{"order.paid", "a", 2})
	eventually(t, "a2 stored", func() bool { return rc.stored(t) == 1 })
	ctx := context.Background()
	var a1, b1 store.DeliveryDeadLetter
	for _, d := range dls {
		if d.Subject == "events.orders.a" {
			a1 = d
		} else {
			b1 = d
		}
	}
	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE passed_at IS NOT NULL"); n != 1 {
		t.Fatalf("passed dead letters = %d, want a1's", n)
	}
	res, err := delivery.Requeue(ctx, o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{Endpoint: e.Name}})
	if err != nil || !slices.Equal(res.Refused, []int64{a1.ID}) || !slices.Equal(res.Done, []int64{b1.ID}) {
		t.Fatalf("requeue %+v %v: want a1 refused, b1 requeued", res, err)
	}
	o.enqueue(t, event{"order.paid", "b", 2})
	eventually(t, "b1 and b2 stored", func() bool { return rc.stored(t) == 3 })
	res, err = delivery.Requeue(ctx, o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{IDs: []int64{a1.ID}}, OutOfOrder: true})
	if err != nil || !slices.Equal(res.Done, []int64{a1.ID}) {
		t.Fatalf("out of order requeue %+v %v", res, err)
	}
	eventually(t, "a1 stored", func() bool { return rc.stored(t) == 4 })
	var order []string
	for _, s := range rc.seen() {
		if s.status == "accepted" {
			order = append(order, s.ev.Key+itoa(s.ev.N))
		}
	}
	if !slices.Equal(order, []string{"a2", "b1", "b2", "a1"}) {
		t.Fatalf("accepted %v, want [a2 b1 b2 a1]", order)
	}
}

// A replay to one endpoint sends the selected events again through its
// reader, with their webhook-ids (the receiver answers duplicate), and
// counts them; a dry run only counts; the other endpoint gets nothing.
func TestReplayToOneEndpoint(t *testing.T) {
	t.Parallel()
	o, rc, other := newOrigin(t), newReceiver(t), newReceiver(t)
	e := endpoint("partner", rc.url)
	o.start(t, e, nil)
	o.start(t, endpoint("other", other.url), nil)
	ids := o.enqueue(t, event{"order.created", "a", 1}, event{"order.created", "b", 1}, event{"order.paid", "a", 2})
	eventually(t, "3 stored at each", func() bool { return rc.stored(t) == 3 && other.stored(t) == 3 })
	ctx := context.Background()
	dry, err := delivery.Replay(ctx, o.db.Pool, o.js.JS, e, delivery.ReplaySelector{FromSeq: 1, ToSeq: 3}, true)
	if err != nil || dry.Matched != 2 || dry.Queued != 0 {
		t.Fatalf("dry run %+v %v", dry, err)
	}
	res, err := delivery.Replay(ctx, o.db.Pool, o.js.JS, e, delivery.ReplaySelector{FromSeq: 1, ToSeq: 3}, false)
	if err != nil || res.Matched != 2 || res.Queued != 2 {
		t.Fatalf("replay by range %+v %v", res, err)
	}
	byID, err := delivery.Replay(ctx, o.db.Pool, o.js.JS, e, delivery.ReplaySelector{EventIDs: []string{ids[2]}}, false)
	if err != nil || byID.Matched != 1 {
		t.Fatalf("replay by id %+v %v", byID, err)
	}
	bySubject, err := delivery.Replay(ctx, o.db.Pool, o.js.JS, e, delivery.ReplaySelector{Subject: "events.orders.b"}, true)
	if err != nil || bySubject.Matched != 1 {
		t.Fatalf("replay by subject %+v %v", bySubject, err)
	}
	byTime, err := delivery.Replay(ctx, o.db.Pool, o.js.JS, e, delivery.ReplaySelector{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}, true)
	if err != nil || byTime.Matched != 3 {
		t.Fatalf("replay by time %+v %v, want the 3 events (not the warm-up, which is not the endpoint's)", byTime, err)
	}
	eventually(t, "3 replays answered", func() bool { return len(rc.seen()) == 6 })
	replayed := map[string]bool{}
	for _, s := range rc.seen()[3:] {
		if s.status != "duplicate" {
			t.Errorf("replay of %s answered %q, want duplicate (same webhook-id)", s.id, s.status)
		}
		replayed[s.id] = true
	}
	if len(replayed) != 3 {
		t.Fatalf("replayed %v, want the 3 events", replayed)
	}
	if n := o.db.AwaitCount(t, 0, "SELECT count(*) FROM hookbridge.delivery_pending"); n != 0 {
		t.Fatalf("%d pending rows left", n)
	}
	if n := len(other.seen()); n != 3 {
		t.Fatalf("the other endpoint got %d requests, want its 3", n)
	}
}

// An endpoint failing every attempt for its disable_after is disabled:
// its durable is paused, its events wait (none is sent), the tracer is
// told; enabling it resumes where it stopped and every event arrives.
func TestAutoDisableWaitsAndEnableResumes(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var down atomic.Bool
	down.Store(true)
	rc.setFail(func(int, event) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := endpoint("partner", rc.url)
	e.DisableAfter = time.Second
	e.Retry = []time.Duration{0}
	for range 50 {
		e.Retry = append(e.Retry, 300*time.Millisecond)
	}
	tr := &recordingTracer{}
	o.instance(t, "", func(opts *delivery.Options) { opts.Tracer = tr }, e)
	first := o.enqueue(t, event{"order.created", "a", 1}, event{"order.created", "b", 1})
	ctx := context.Background()
	state := func() string {
		rows, err := store.DeliveryEndpointList(ctx, o.db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Name == e.Name {
				return r.State
			}
		}
		return ""
	}
	eventually(t, "the endpoint disabled", func() bool { return state() == store.DeliveryDisabled })
	eventually(t, "its durable paused", func() bool {
		c, err := o.js.JS.Consumer(ctx, "EVENTS", delivery.ConsumerName(e.Name))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.Paused
	})
	eventually(t, "the tracer told of the disable", func() bool {
		return tr.has(delivery.TraceEndpointStateData{Endpoint: e.Name, State: delivery.StateDisabled})
	})
	later := o.enqueue(t, event{"order.paid", "a", 2}, event{"order.paid", "b", 2})
	eventually(t, "the new events wait in EVENTS", func() bool {
		c, err := o.js.JS.Consumer(ctx, "EVENTS", delivery.ConsumerName(e.Name))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 2
	})
	for _, s := range rc.seen() {
		if slices.Contains(later, s.id) {
			t.Fatalf("%s was sent while the endpoint was disabled", s.id)
		}
	}
	down.Store(false)
	if changed, err := delivery.Enable(ctx, o.db.Pool, o.js.JS, e.Name); err != nil || !changed {
		t.Fatalf("enable: %v %v", changed, err)
	}
	eventually(t, "every event stored", func() bool { return rc.stored(t) == 4 })
	stored := map[string]bool{}
	for _, s := range rc.seen() {
		if s.status == "accepted" {
			stored[s.id] = true
		}
	}
	for _, id := range append(first, later...) {
		if !stored[id] {
			t.Errorf("%s not delivered after the enable", id)
		}
	}
	if n := o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_dead_letters"); n != 0 {
		t.Fatalf("%d dead letters: a disabled endpoint's events must wait, not die", n)
	}
}

// A manual disable stops the reader at once and an enable resumes it.
func TestManualDisableAndEnable(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	e := endpoint("partner", rc.url)
	o.start(t, e, nil)
	ctx := context.Background()
	if changed, err := delivery.Disable(ctx, o.db.Pool, o.js.JS, e.Name, "manual: partner maintenance"); err != nil || !changed {
		t.Fatalf("disable: %v %v", changed, err)
	}
	if changed, _ := delivery.Disable(ctx, o.db.Pool, o.js.JS, e.Name, ""); changed {
		t.Fatal("a second disable changed something")
	}
	ids := o.enqueue(t, event{"order.created", "a", 1})
	eventually(t, "the event waits", func() bool {
		st, err := delivery.Status(ctx, o.db.Pool, o.js.JS, []delivery.Endpoint{e})
		return err == nil && st[0].State == delivery.StateDisabled && st[0].Paused && st[0].Pending == 1 &&
			st[0].DisabledReason == "manual: partner maintenance"
	})
	if n := len(rc.seen()); n != 0 {
		t.Fatalf("%d requests while disabled", n)
	}
	if _, err := delivery.Enable(ctx, o.db.Pool, o.js.JS, e.Name); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the event stored", func() bool { return rc.stored(t) == 1 })
	if rc.seen()[0].id != ids[0] {
		t.Fatalf("sent %s, want %s", rc.seen()[0].id, ids[0])
	}
	st, err := delivery.Status(ctx, o.db.Pool, o.js.JS, []delivery.Endpoint{e})
	if err != nil || st[0].State != delivery.StateEnabled || st[0].Owner == "" {
		t.Fatalf("status %+v %v", st, err)
	}
}

// endpoints test sends one signed event a hookbridge ingress verifies.
func TestSendTest(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	res := delivery.SendTest(context.Background(), endpoint("partner", rc.url), verify.SignStandard, nil)
	if !res.Success || res.Status != http.StatusAccepted || res.Class != "2xx" || res.Latency <= 0 || res.EventID == "" {
		t.Fatalf("test result %+v", res)
	}
	if rc.stored(t) != 1 || rc.seen()[0].id != res.EventID {
		t.Fatalf("receiver saw %+v", rc.seen())
	}
	// A refused address is reported, not sent.
	e := endpoint("partner", rc.url)
	e.AllowPrivate = false
	e.URL = "http://localhost:1/hooks"
	if res := delivery.SendTest(context.Background(), e, verify.SignStandard, nil); res.Success || res.Class != "refused" {
		t.Fatalf("test of a refused address %+v", res)
	}
}

// The durable of an endpoint no longer configured is reported.
func TestOrphanedDurablesAreReported(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	ctx := context.Background()
	for _, n := range []string{"old", "kept"} {
		if _, err := o.js.JS.CreateConsumer(ctx, "EVENTS", jetstream.ConsumerConfig{Durable: delivery.ConsumerName(n), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := delivery.Orphans(ctx, o.js.JS, []string{"kept"})
	if err != nil || !slices.Equal(got, []string{"delivery_old"}) {
		t.Fatalf("orphans %v %v, want [delivery_old]", got, err)
	}
}

// recordingTracer records what it is told.
type recordingTracer struct {
	mu      sync.Mutex
	starts  int
	ends    []delivery.TraceAttemptEndData
	dead    []delivery.TraceDeadLetterData
	states  []delivery.TraceEndpointStateData
	headers []string // traceparent of each start's event
}

func (r *recordingTracer) TraceAttemptStart(ctx context.Context, d delivery.TraceAttemptStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	r.headers = append(r.headers, d.Header.Get("traceparent"))
	return ctx
}

func (r *recordingTracer) TraceAttemptEnd(_ context.Context, d delivery.TraceAttemptEndData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ends = append(r.ends, d)
}

func (r *recordingTracer) TraceDeadLetter(_ context.Context, d delivery.TraceDeadLetterData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead = append(r.dead, d)
}

func (r *recordingTracer) TraceEndpointState(_ context.Context, d delivery.TraceEndpointStateData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, d)
}

func (r *recordingTracer) has(want delivery.TraceEndpointStateData) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.states, func(d delivery.TraceEndpointStateData) bool {
		return d.Endpoint == want.Endpoint && d.State == want.State
	})
}

// The tracer sees each attempt start and end with its class, the dead
// letter, and the endpoint's failing and recovery.
func TestTracerSeesAttemptsAndDeadLetters(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	rc.setFail(func(n int, ev event) int {
		if ev.Key == "dead" || n == 0 {
			return http.StatusBadGateway
		}
		return 0
	})
	tr := &recordingTracer{}
	e := endpoint("partner", rc.url)
	o.instance(t, "", func(opts *delivery.Options) { opts.Tracer = tr }, e)
	o.enqueue(t, event{"order.created", "a", 1})
	eventually(t, "a stored", func() bool { return rc.stored(t) == 1 })
	o.enqueue(t, event{"order.created", "dead", 1})
	eventually(t, "the dead letter traced", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.dead) == 1
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	classes := map[string]int{}
	for _, d := range tr.ends {
		classes[d.Class]++
	}
	// a: a 502 then a 202; dead: four 502s.
	if tr.starts != 6 || len(tr.ends) != 6 || classes["5xx"] != 5 || classes["2xx"] != 1 {
		t.Fatalf("starts %d, ends %v", tr.starts, classes)
	}
	if d := tr.dead[0]; d.Endpoint != e.Name || d.Attempts != 4 || d.LastStatus != http.StatusBadGateway || d.LastClass != "5xx" {
		t.Fatalf("dead letter %+v", d)
	}
	var states []string
	for _, s := range tr.states {
		states = append(states, s.State)
	}
	if len(states) < 3 || states[0] != delivery.StateFailing || states[1] != delivery.StateEnabled || states[2] != delivery.StateFailing {
		t.Fatalf("states %v, want failing, enabled (recovered), failing", states)
	}
}

// A replay selected by both a start sequence and a start time takes only
// the events that meet both: the time still bounds it from below (an
// event stored before it is not sent again).
func TestReplayFromSeqKeepsSince(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	e := endpoint("partner", "http://127.0.0.1:1")
	o.enqueue(t, event{"order.created", "a", 1})
	eventually(t, "a1 in EVENTS", func() bool { return o.js.StreamMsgs(t, stream.Events) == 2 })
	since := time.Now()
	ids := o.enqueue(t, event{"order.created", "b", 1})
	eventually(t, "b1 in EVENTS", func() bool { return o.js.StreamMsgs(t, stream.Events) == 3 })
	ctx := context.Background()
	res, err := delivery.Replay(ctx, o.db.Pool, o.js.JS, e, delivery.ReplaySelector{FromSeq: 1, Since: since}, false)
	if err != nil || res.Matched != 1 || res.Queued != 1 {
		t.Fatalf("replay from seq 1 since %v: %+v %v, want b1 alone", since, res, err)
	}
	if n := o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_pending WHERE endpoint = 'partner' AND event_id = $1", ids[0]); n != 1 {
		t.Fatalf("b1 queued %d times, want 1", n)
	}
}
