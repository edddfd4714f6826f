package delivery_test

import (
	"testing"
	"time"
)

// Two instances of a rate-limited endpoint together stay within its
// rate: the endpoint has one reader at a time (a pinned priority group),
// so the limit of one process is the endpoint's.
func TestRateLimitHoldsAcrossInstances(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	e := endpoint("partner", rc.url)
	e.Rate = 10
	o.start(t, e, nil)
	o.start(t, e, nil) // a second instance: same endpoint, same durable
	const n = 21
	var evs []event
	for i := range n {
		evs = append(evs, event{"order.created", "k" + itoa(i%3), i})
	}
	o.enqueue(t, evs...)

	eventually(t, "every event stored", func() bool { return rc.stored(t) == n })
	log := rc.seen()
	if len(log) < n {
		t.Fatalf("receiver saw %d requests, want at least %d", len(log), n)
	}
	// 21 requests at 10/s take 2s (the first is free); two readers with
	// a limit each would take 1s. 10% slack for timer granularity.
	span := log[len(log)-1].at.Sub(log[0].at)
	if want := time.Duration(float64(n-1) / e.Rate * 0.9 * float64(time.Second)); span < want {
		t.Fatalf("%d requests in %s: faster than %v/s (want at least %s)", len(log), span, e.Rate, want)
	}
	for i := 1; i < len(log); i++ {
		// A burst of one: no two requests closer than half the interval.
		if gap := log[i].at.Sub(log[i-1].at); gap < 50*time.Millisecond {
			t.Errorf("requests %d and %d only %s apart", i-1, i, gap)
		}
	}
}
