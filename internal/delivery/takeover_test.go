package delivery_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/store"
)

// readerFirst returns two instance names, the first of which is the one
// the endpoints are assigned to while both run: the test knows which
// instance reads them.
func readerFirst(t *testing.T, endpoints ...string) (reader, standby string) {
	t.Helper()
	for i := range 1000 {
		a, b := "a"+strconv.Itoa(i), "b"+strconv.Itoa(i)
		members := []string{a, b}
		slices.Sort(members)
		if slices.Equal(delivery.Assign(members, a, endpoints), endpoints) {
			return a, b
		}
	}
	t.Fatal("no pair of instance names assigns every endpoint to the first")
	return "", ""
}

// orderedEndpoint is an ordered endpoint of the tests whose failing key
// retries every 200ms for 20s, so it never dead-letters within a test.
func orderedEndpoint(name, url string) delivery.Endpoint {
	e := endpoint(name, url)
	e.Ordered = true
	e.Retry = []time.Duration{0}
	for range 100 {
		e.Retry = append(e.Retry, 200*time.Millisecond)
	}
	return e
}

// owner is the instance holding the endpoint's lease ("" when none).
func (o *origin) owner(t *testing.T, endpoint string) string {
	t.Helper()
	rows, err := store.DeliveryEndpointList(context.Background(), o.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Name == endpoint && r.Leased {
			return r.Owner
		}
	}
	return ""
}

// accepted checks the receiver's log: per key, the events were stored in
// stream order; it returns how many it stored and how many requests it
// answered as duplicates. An event is stored by its request answered
// accepted, or, when none was (its client gave up: an instance killed),
// by its first request that reached the ingress.
func accepted(t *testing.T, log []seen) (acceptedN, duplicates int) {
	t.Helper()
	storedAt := map[string]int{}
	for i, s := range log {
		if _, ok := storedAt[s.id]; !ok && s.status == "accepted" {
			storedAt[s.id] = i
		}
	}
	for i, s := range log {
		if _, ok := storedAt[s.id]; !ok && s.reached && s.status != "duplicate" {
			for _, later := range log[i+1:] {
				if later.id == s.id && later.status == "duplicate" {
					storedAt[s.id] = i
					break
				}
			}
		}
	}
	last := map[string]int{}
	for i, s := range log {
		if s.status == "duplicate" {
			duplicates++
		}
		if at, ok := storedAt[s.id]; !ok || at != i {
			continue
		}
		acceptedN++
		if s.ev.N <= last[s.ev.Key] {
			t.Errorf("key %s: event %d stored after %d", s.ev.Key, s.ev.N, last[s.ev.Key])
		}
		last[s.ev.Key] = s.ev.N
	}
	return acceptedN, duplicates
}

// The reader of an ordered endpoint keeps it while it holds a failing
// key for many times the pin's TTL: the other instance sends nothing, no
// event of the key and no later one. (Before, the pin moved from the live
// reader after its TTL and the other instance sent a later event of the
// key first: accepted order [3 1 2].)
func TestPinStaysWithLiveReaderHoldingFailingKey(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var fixed atomic.Bool
	rc.setFail(func(_ int, ev event) int {
		if ev.Key == "a" && ev.N == 1 && !fixed.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := orderedEndpoint("partner", rc.url)
	reader, standby := readerFirst(t, e.Name)
	var opts delivery.Options
	delivery.Fast(&opts)
	ttl := delivery.PinnedTTL(&opts)
	o.instance(t, reader, nil, e)
	eventually(t, "the reader holds the endpoint", func() bool { return o.owner(t, e.Name) == reader })
	o.instance(t, standby, nil, e)
	o.enqueue(t, event{"order.created", "a", 1}, event{"order.created", "a", 2})
	// a1 fails for four times the pin's TTL (server-side times), then a3
	// is published and a1 fails as long again.
	failingFor := func(d time.Duration) func() bool {
		return func() bool {
			log := rc.seen()
			return len(log) > 0 && log[len(log)-1].at.Sub(log[0].at) > d
		}
	}
	eventually(t, "a1 failing for 4 pin TTLs", failingFor(4*ttl))
	o.enqueue(t, event{"order.paid", "a", 3})
	eventually(t, "a1 failing for 8 pin TTLs", failingFor(8*ttl))
	fixed.Store(true)

	eventually(t, "3 deliveries stored", func() bool { return rc.stored(t) == 3 })
	var order []int
	for _, s := range rc.seen() {
		if s.instance != reader {
			t.Errorf("instance %s sent a%d (webhook-id %s); only %s reads the endpoint", s.instance, s.ev.N, s.id, reader)
		}
		if s.status == "accepted" {
			order = append(order, s.ev.N)
		}
	}
	if !slices.Equal(order, []int{1, 2, 3}) {
		t.Fatalf("key a accepted in order %v, want [1 2 3]", order)
	}
}

// Two instances, an ordered endpoint, a key failing then recovering; the
// reader is killed mid-run (its NATS connection cut, its attempts cut,
// nothing handed back) and the other takes the endpoint over: no event
// is accepted out of its key's order, every event is received, and the
// duplicates (resends of what the killed reader had sent and not acked)
// are counted.
func TestKilledReaderKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var fixed atomic.Bool
	rc.setFail(func(_ int, ev event) int {
		if ev.Key == "f" && ev.N == 1 && !fixed.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := orderedEndpoint("partner", rc.url)
	reader, standby := readerFirst(t, e.Name)
	a := o.instance(t, reader, nil, e)
	eventually(t, "the first instance reads the endpoint", func() bool { return o.owner(t, e.Name) == reader })
	o.instance(t, standby, nil, e)
	keys := []string{"f", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	wave := func(from, to int) {
		var evs []event
		for n := from; n <= to; n++ {
			for _, k := range keys {
				evs = append(evs, event{"order.updated", k, n})
			}
		}
		o.enqueue(t, evs...)
	}
	wave(1, 6)
	eventually(t, "some events accepted and f1 failing", func() bool {
		n, f1 := 0, 0
		for _, s := range rc.seen() {
			if s.status == "accepted" {
				n++
			}
			if s.ev.Key == "f" && s.ev.N == 1 {
				f1++
			}
		}
		return n >= 10 && f1 >= 2
	})
	a.kill()
	wave(7, 12)
	eventually(t, "the other instance sends", func() bool {
		for _, s := range rc.seen() {
			if s.instance == standby {
				return true
			}
		}
		return false
	})
	fixed.Store(true)

	total := 12 * len(keys)
	eventually(t, "every event stored", func() bool { return int(rc.stored(t)) == total })
	n, dups := accepted(t, rc.seen())
	if n != total {
		t.Fatalf("accepted %d, want %d", n, total)
	}
	t.Logf("%d events accepted in key order across the kill; %d duplicate requests (answered 200 duplicate)", n, dups)
}

// A key failing with more later events than an ordered endpoint holds in
// memory stops only itself: its later events are parked in Postgres and
// the endpoint's other keys are delivered.
func TestFailingKeyWithManyLaterEventsHoldsOnlyItself(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var fixed atomic.Bool
	rc.setFail(func(_ int, ev event) int {
		if ev.Key == "a" && !fixed.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := orderedEndpoint("partner", rc.url)
	o.start(t, e, nil)
	const later = 300 // more than the endpoint's window in memory (256)
	var evs []event
	for n := 1; n <= later+1; n++ {
		evs = append(evs, event{"order.updated", "a", n})
	}
	for n := 1; n <= 20; n++ {
		evs = append(evs, event{"order.updated", "b", n})
	}
	o.enqueue(t, evs...)

	eventually(t, "key b delivered while a fails", func() bool { return rc.stored(t) == 20 })
	if n := o.db.AwaitCount(t, later+1, "SELECT count(*) FROM hookbridge.delivery_pending WHERE ordering_key = 's:events.orders.a'"); n != later+1 {
		t.Fatalf("key a has %d events in Postgres, want %d (the failing one and those parked behind it)", n, later+1)
	}
	fixed.Store(true)
	eventually(t, "every event stored", func() bool { return int(rc.stored(t)) == later+21 })
	if n, _ := accepted(t, rc.seen()); n != later+21 {
		t.Fatalf("accepted %d, want %d", n, later+21)
	}
	if n := o.db.AwaitCount(t, 0, "SELECT count(*) FROM hookbridge.delivery_pending"); n != 0 {
		t.Fatalf("%d deliveries left in Postgres", n)
	}
}

// An instance that joins takes its share of the endpoints: the instance
// that read them all hands one over (its attempts end, what it held goes
// back in order, its lease is released) and the newcomer reads it; keys
// stay in order across the handover, a failing one included.
func TestJoiningInstanceTakesItsShare(t *testing.T) {
	t.Parallel()
	o, rc1, rc2 := newOrigin(t), newReceiver(t), newReceiver(t)
	var fixed atomic.Bool
	fail := func(_ int, ev event) int {
		if ev.Key == "f" && ev.N == 1 && !fixed.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	rc1.setFail(fail)
	rc2.setFail(fail)
	e1, e2 := orderedEndpoint("one", rc1.url), orderedEndpoint("two", rc2.url)
	e2.Subjects = e1.Subjects
	o.instance(t, "first", nil, e1, e2)
	eventually(t, "the first instance reads both", func() bool { return o.owner(t, "one") == "first" && o.owner(t, "two") == "first" })
	var evs []event
	for n := 1; n <= 5; n++ {
		for _, k := range []string{"f", "k1", "k2"} {
			evs = append(evs, event{"order.updated", k, n})
		}
	}
	o.enqueue(t, evs...)
	eventually(t, "f1 failing at both", func() bool {
		count := func(rc *receiver) int {
			n := 0
			for _, s := range rc.seen() {
				if s.ev.Key == "f" {
					n++
				}
			}
			return n
		}
		return count(rc1) >= 2 && count(rc2) >= 2
	})
	o.instance(t, "second", nil, e1, e2)
	eventually(t, "one endpoint each", func() bool {
		a, b := o.owner(t, "one"), o.owner(t, "two")
		return a != "" && b != "" && a != b
	})
	moved := "one"
	if o.owner(t, "two") == "second" {
		moved = "two"
	}
	var evs2 []event
	for n := 6; n <= 8; n++ {
		for _, k := range []string{"f", "k1", "k2"} {
			evs2 = append(evs2, event{"order.updated", k, n})
		}
	}
	o.enqueue(t, evs2...)
	fixed.Store(true)
	for _, rc := range []*receiver{rc1, rc2} {
		eventually(t, "every event stored", func() bool { return rc.stored(t) == 24 })
		if n, _ := accepted(t, rc.seen()); n != 24 {
			t.Fatalf("accepted %d, want 24", n)
		}
	}
	rc := rc1
	if moved == "two" {
		rc = rc2
	}
	last := rc.seen()[len(rc.seen())-1]
	if last.instance != "second" {
		t.Fatalf("endpoint %s, handed over to the second instance, was last sent to by %s", moved, last.instance)
	}
}
