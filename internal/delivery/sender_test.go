package delivery_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/store"
)

// Each event is delivered once, signed so that a hookbridge ingress that
// knows only the newer of the two active secrets verifies it, with the
// outbox id as webhook-id, and each attempt is recorded.
func TestDeliversEachEventOnceVerified(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	o.start(t, endpoint("partner", rc.url), nil)
	ids := o.enqueue(t, event{"order.created", "a", 1}, event{"order.created", "b", 1}, event{"order.paid", "a", 2})

	eventually(t, "3 deliveries stored by the receiver", func() bool { return rc.stored(t) == 3 })
	if n := o.db.AwaitCount(t, 3, "SELECT count(*) FROM hookbridge.delivery_attempts WHERE status_code = 202 AND error_class = ''"); n != 3 {
		t.Fatalf("successful attempts recorded = %d, want 3", n)
	}
	var got []string
	for _, s := range rc.seen() {
		if s.code != http.StatusAccepted {
			t.Errorf("receiver answered %d (%s) to %s", s.code, s.status, s.id)
		}
		got = append(got, s.id)
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("webhook-ids %v, want the outbox ids %v", got, ids)
	}
	if n := o.attempts(t, "partner"); n != 3 {
		t.Fatalf("attempts = %d, want 3", n) // all three were counted above
	}
}

// A 500 then a 200: two attempts recorded, both with the same webhook-id,
// and the receiver stores the event once.
func TestRetryKeepsWebhookID(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	rc.setFail(func(n int, _ event) int {
		if n == 0 {
			return http.StatusInternalServerError
		}
		return 0
	})
	o.start(t, endpoint("partner", rc.url), nil)
	ids := o.enqueue(t, event{"order.created", "a", 1})

	eventually(t, "the delivery stored", func() bool { return rc.stored(t) == 1 })
	eventually(t, "two attempts recorded", func() bool { return o.attempts(t, "partner") == 2 })
	hist, err := store.DeliveryAttemptListForEvent(context.Background(), o.db.Pool, "partner", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].StatusCode != 500 || hist[0].ErrorClass != "status" || hist[0].Attempt != 1 ||
		hist[1].StatusCode != 202 || hist[1].Attempt != 2 || hist[1].ErrorClass != "" {
		t.Fatalf("history %+v, want attempt 1 = 500, attempt 2 = 202", hist)
	}
	if hist[0].Excerpt != "receiver says no" {
		t.Errorf("excerpt %q", hist[0].Excerpt)
	}
	s := rc.seen()
	if len(s) != 2 || s[0].id != ids[0] || s[1].id != ids[0] {
		t.Fatalf("receiver saw %+v, want two requests with webhook-id %s", s, ids[0])
	}
}

// Every attempt failing ends in the endpoint's dead letter table with the
// attempt count and last status, and the event is not tried again.
func TestRetryLimitEndsInDeadLetters(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	rc.setFail(func(int, event) int { return http.StatusBadGateway })
	e := endpoint("partner", rc.url)
	o.start(t, e, nil)
	ids := o.enqueue(t, event{"order.created", "a", 1})

	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters"); n != 1 {
		t.Fatalf("dead letters = %d, want 1", n)
	}
	dls, err := store.DeliveryDeadLetterFind(context.Background(), o.db.Pool, store.DeliveryDeadLetterFilter{Endpoint: "partner"})
	if err != nil {
		t.Fatal(err)
	}
	d := dls[0]
	if d.EventID != ids[0] || d.Attempts != len(e.Retry) || d.LastStatus != 502 || d.LastExcerpt != "receiver says no" || d.Subject != "events.orders.a" ||
		!d.HasPayload {
		t.Fatalf("dead letter %+v", d)
	}
	if n := o.db.AwaitCount(t, len(e.Retry), "SELECT count(*) FROM hookbridge.delivery_attempts"); n != len(e.Retry) {
		t.Fatalf("attempts = %d, want %d", n, len(e.Retry))
	}
	// Terminated: nothing left pending on the endpoint's consumer.
	eventually(t, "the consumer holds nothing", func() bool {
		c, err := o.js.JS.Consumer(context.Background(), "EVENTS", "delivery_partner")
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	if n := len(rc.seen()); n != len(e.Retry) {
		t.Fatalf("receiver got %d requests, want %d", n, len(e.Retry))
	}
	if rc.stored(t) != 0 {
		t.Fatal("receiver stored a refused delivery")
	}
}

// A 429 with Retry-After longer than the schedule's step waits for it.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var first atomic.Bool
	rc.setFail(func(n int, _ event) int {
		if n == 0 && first.CompareAndSwap(false, true) {
			return http.StatusTooManyRequests
		}
		return 0
	})
	o.start(t, endpoint("partner", rc.url), nil)
	_ = o.enqueue(t, event{"order.created", "a", 1})
	eventually(t, "the delivery stored", func() bool { return rc.stored(t) == 1 })
	s := rc.seen()
	if len(s) != 2 {
		t.Fatalf("receiver saw %d requests, want 2", len(s))
	}
	if gap := s[1].at.Sub(s[0].at); gap < time.Second {
		t.Fatalf("retry after %s, want at least the 1s Retry-After", gap)
	}
}

// An endpoint whose receiver hangs does not delay another on the same
// instance: the healthy one gets every event while the hanging one has
// not finished a single request (the receivers' own counts; the hang
// lasts until the test ends, so no timing decides it).
func TestFailingEndpointDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	// Answers nothing until the test ends. (The body is read first: only
	// then does the server notice a client that hung up.)
	release := make(chan struct{})
	var started, finished atomic.Int32
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		started.Add(1)
		defer finished.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	slow := endpoint("stuck", hang.URL)
	slow.Timeout = 10 * time.Minute
	o.instance(t, "", nil, slow, endpoint("healthy", rc.url))
	t.Cleanup(func() { close(release) }) // before the instance stops: its attempts end
	var evs []event
	for i := range 40 {
		evs = append(evs, event{"order.created", "k" + itoa(i%5), i})
	}
	o.enqueue(t, evs...)

	eventually(t, "the stuck endpoint's first requests hanging", func() bool { return started.Load() > 0 })
	eventually(t, "the healthy endpoint got all 40", func() bool { return rc.stored(t) == 40 })
	if n := finished.Load(); n != 0 {
		t.Fatalf("the hanging receiver finished %d requests; the test proves nothing", n)
	}
	if n := o.db.AwaitCount(t, 40, "SELECT count(*) FROM hookbridge.delivery_attempts WHERE endpoint = 'healthy'"); n != 40 {
		t.Fatalf("healthy attempts = %d, want 40", n)
	}
	if n := o.attempts(t, "stuck"); n != 0 {
		t.Fatalf("the stuck endpoint recorded %d attempts", n)
	}
}

// A name that resolves to loopback is refused when the sender connects
// (the configuration saw only a name): the receiver gets no call, each
// attempt is recorded as refused_address, and the schedule ends in a
// dead letter.
func TestNameResolvingToLoopbackIsRefusedAtConnect(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	e := endpoint("partner", strings.Replace(rc.url, "127.0.0.1", "localhost", 1))
	e.AllowPrivate = false
	if err := e.WithDefaults().Validate(); err != nil {
		t.Fatalf("a URL naming a host must pass the configuration check: %v", err)
	}
	o.start(t, e, nil)
	o.enqueue(t, event{"order.created", "a", 1})

	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE last_error_class = 'refused_address' AND last_status IS NULL"); n != 1 {
		t.Fatalf("refused dead letters = %d, want 1", n)
	}
	if n := o.db.AwaitCount(t, len(e.Retry), "SELECT count(*) FROM hookbridge.delivery_attempts WHERE error_class = 'refused_address'"); n != len(e.Retry) {
		t.Fatalf("refused attempts = %d, want %d", n, len(e.Retry))
	}
	if n := len(rc.seen()); n != 0 {
		t.Fatalf("receiver got %d requests through a refused address", n)
	}
}
