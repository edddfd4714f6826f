package delivery_test

import (
	"testing"
	"time"
)

// Two instances of a rate- and concurrency-limited endpoint together
// stay within its limits, also while the reader is killed and the other
// takes the endpoint over. The receiver counts what it saw: the most
// requests it answered at once, and the most that arrived within any one
// second (its own clock). One reader at a time keeps them at the
// endpoint's concurrency and rate; two readers would double both. The
// per-second bound allows half the rate on top for requests the network
// or a busy machine delivered closer together than they were sent, and
// still fails two readers (twice the rate).
func TestRateAndConcurrencyHoldWithTwoInstances(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	rc.hold = 250 * time.Millisecond // so that requests overlap
	e := endpoint("partner", rc.url)
	e.Rate = 10
	e.Concurrency = 2
	e.Timeout = 10 * time.Second // a loaded machine's slow answer is no timeout (which would free a slot early)
	reader, standby := readerFirst(t, e.Name)
	a := o.instance(t, reader, nil, e)
	eventually(t, "the first instance reads the endpoint", func() bool { return o.owner(t, e.Name) == reader })
	o.instance(t, standby, nil, e)
	const n = 40
	var evs []event
	for i := range n {
		evs = append(evs, event{"order.created", "k" + itoa(i%4), i})
	}
	o.enqueue(t, evs...)
	eventually(t, "a third of the events stored", func() bool { return rc.stored(t) >= n/3 })
	a.kill()

	eventually(t, "every event stored", func() bool { return rc.stored(t) == n })
	log := rc.seen()
	by := map[string]int{}
	for _, s := range log {
		by[s.instance]++
	}
	if by[reader] == 0 || by[standby] == 0 {
		t.Fatalf("requests by instance %v: both must have sent (the test proves nothing otherwise)", by)
	}
	most, _ := rc.concurrency()
	if most > e.Concurrency {
		t.Fatalf("receiver answered %d requests at once; the endpoint's concurrency is %d", most, e.Concurrency)
	}
	perSecond := 0
	for i := range log {
		k := 0
		for j := i; j < len(log) && log[j].at.Sub(log[i].at) < time.Second; j++ {
			k++
		}
		perSecond = max(perSecond, k)
	}
	if bound := int(e.Rate*1.5) + 1; perSecond > bound {
		t.Fatalf("%d requests arrived within one second; the rate is %v/s (bound %d)", perSecond, e.Rate, bound)
	}
	t.Logf("%d requests (%v by instance), at most %d at once and %d within a second", len(log), by, most, perSecond)
}
