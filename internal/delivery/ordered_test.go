package delivery_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/store"
)

// On an ordered endpoint a failing event holds the later events of its
// key, and only those: key a's first event fails until every event of
// key b is stored; a2 and a3 are not even tried before a1 is accepted.
func TestOrderedEndpointHoldsOnlyTheFailingKey(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	bStored := func() int {
		n := 0
		for _, s := range rc.seen() {
			if s.ev.Key == "b" && s.status == "accepted" {
				n++
			}
		}
		return n
	}
	rc.setFail(func(_ int, ev event) int {
		if ev.Key == "a" && ev.N == 1 && bStored() < 3 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := endpoint("partner", rc.url)
	e.Ordered = true
	e.Retry = []time.Duration{0}
	for range 100 {
		e.Retry = append(e.Retry, 200*time.Millisecond) // 20s of retries: a1 must not dead-letter
	}
	o.start(t, e, nil)
	o.enqueue(t, event{"order.created", "a", 1}, event{"order.created", "b", 1}, event{"order.paid", "a", 2},
		event{"order.paid", "b", 2}, event{"order.shipped", "a", 3}, event{"order.shipped", "b", 3})

	eventually(t, "6 deliveries stored", func() bool { return rc.stored(t) == 6 })
	log := rc.seen()
	a1Accepted, a1Requests := -1, 0
	for i, s := range log {
		if s.ev.Key == "a" && s.ev.N == 1 {
			a1Requests++
			if s.status == "accepted" {
				a1Accepted = i
			}
		}
	}
	if a1Requests < 2 {
		t.Fatalf("a1 was requested %d times; it should have failed at least once", a1Requests)
	}
	last := map[string]int{}
	bBefore := 0
	for i, s := range log {
		if s.ev.Key == "a" && s.ev.N > 1 && i < a1Accepted {
			t.Errorf("a%d requested before a1 was accepted (request %d < %d)", s.ev.N, i, a1Accepted)
		}
		if s.ev.Key == "b" && s.status == "accepted" && i < a1Accepted {
			bBefore++
		}
		if s.status != "accepted" {
			continue
		}
		if s.ev.N <= last[s.ev.Key] {
			t.Errorf("key %s: %d accepted after %d", s.ev.Key, s.ev.N, last[s.ev.Key])
		}
		last[s.ev.Key] = s.ev.N
	}
	if bBefore != 3 {
		t.Fatalf("%d of key b's 3 events were accepted while a1 failed, want all 3: %+v", bBefore, log)
	}
	if n := o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_dead_letters"); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// Seed failure point: the sender stops after the receiver answered and
// before the ack. The next sender sends the event again with the same
// webhook-id; the receiver's ingress answers 200 duplicate and stores it
// once.
func TestCrashAfterSendRetriesWithSameID(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	e := endpoint("partner", rc.url)
	sent := make(chan struct{})
	var first sync.Once
	// Every answer this instance gets is lost with it: once its first
	// answer was dropped, the message goes back and the same instance may
	// send it again before it is stopped (on a loaded machine it did, and
	// that answer was recorded).
	stop := o.start(t, e, func(id string, status int) bool {
		first.Do(func() { close(sent) })
		return true
	})
	ids := o.enqueue(t, event{"order.created", "a", 1})
	select {
	case <-sent:
	case <-time.After(time.Minute):
		t.Fatal("no send within a minute")
	}
	stop()
	if n := o.attempts(t, "partner"); n != 0 {
		t.Fatalf("%d attempts recorded by the sender that crashed before recording", n)
	}
	o.start(t, e, nil)

	// The next instance's send is recorded: one attempt, the resend.
	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_attempts"); n != 1 {
		t.Fatalf("attempts = %d, want 1", n)
	}
	log := rc.seen()
	if len(log) < 2 {
		t.Fatalf("receiver saw %d requests, want the lost one and the resend", len(log))
	}
	for i, r := range log {
		if r.id != ids[0] {
			t.Fatalf("request %d had webhook-id %s, want %s", i, r.id, ids[0])
		}
		if i == 0 && (r.code != http.StatusAccepted || r.status != "accepted") {
			t.Fatalf("receiver answered the first request %d %q, want 202 accepted", r.code, r.status)
		}
		if i > 0 && (r.code != http.StatusOK || r.status != "duplicate") {
			t.Fatalf("receiver answered request %d %d %q, want 200 duplicate", i, r.code, r.status)
		}
	}
	if n := rc.stored(t); n != 1 {
		t.Fatalf("receiver stored %d, want 1", n)
	}
	hist, err := store.DeliveryAttemptListForEvent(context.Background(), o.db.Pool, "partner", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// The attempt cut short by the crash wrote nothing (attempt counts
	// are written only on failure): the resend is attempt 1 again.
	if hist[0].Attempt != 1 || hist[0].StatusCode != http.StatusOK {
		t.Fatalf("attempt %+v, want attempt 1 answered 200", hist[0])
	}
}

// A takeover keeps the order: the first reader holds a1 (failing) with
// a2 and a3 parked behind it and stops without acking them; a4 is
// published; the next reader gets a4 at once and a1..a3 only when their
// ack wait has passed, and still delivers a1, a2, a3, a4.
func TestOrderedTakeoverKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var failing atomic.Bool
	failing.Store(true)
	rc.setFail(func(_ int, ev event) int {
		if failing.Load() && ev.Key == "a" {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := endpoint("partner", rc.url)
	e.Ordered = true
	e.Retry = []time.Duration{0}
	for range 100 {
		e.Retry = append(e.Retry, 200*time.Millisecond)
	}
	stop := o.start(t, e, nil)
	o.enqueue(t, event{"order.created", "a", 1}, event{"order.paid", "a", 2}, event{"order.shipped", "a", 3})
	eventually(t, "a1 tried twice by the first reader", func() bool { return len(rc.seen()) >= 2 })
	stop()
	for _, s := range rc.seen() {
		if s.ev.N != 1 {
			t.Fatalf("a%d tried while a1 failed", s.ev.N)
		}
	}
	o.enqueue(t, event{"order.delivered", "a", 4})
	eventually(t, "a4 in EVENTS", func() bool { return o.js.StreamMsgs(t, "EVENTS") == 5 }) // and the warm-up
	failing.Store(false)
	o.start(t, e, nil)

	eventually(t, "4 deliveries stored", func() bool { return rc.stored(t) == 4 })
	var order []int
	for _, s := range rc.seen() {
		if s.status == "accepted" {
			order = append(order, s.ev.N)
		}
	}
	if !slices.Equal(order, []int{1, 2, 3, 4}) {
		t.Fatalf("key a accepted in order %v, want [1 2 3 4]", order)
	}
}
