package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A backlog of deliveries Postgres tracks waits there, not in memory: an
// unordered endpoint whose attempts are slow prepares (reads the body of)
// at most twice its concurrency of them at once (the live window),
// however long the backlog and however many looks at Postgres its
// attempts last; and each row is sent once, even when its delivery ends
// while a look reads the rows that are due. Before, every look started
// as many more, each holding its body while it waited for a slot, and a
// row that ended during a look was started again.
func TestRowBacklogWaitsInPostgres(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	const events, concurrency = 40, 2
	var (
		received, prepared, most atomic.Int64
		release                  = make(chan struct{})
		tooMany                  = make(chan struct{})
		once                     sync.Once
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if received.Add(1) == 1 {
			// The first attempt is slow: it lasts while the loop looks at
			// Postgres again and again (every 50 ms while rows are due),
			// until more rows than the concurrency are prepared, or a
			// while (the bound it checks is the same however long).
			select {
			case <-release:
			case <-tooMany:
			case <-time.After(3 * time.Second):
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(release) })
	e := endpoint("slow", hs.URL)
	e.Concurrency, e.Timeout = concurrency, 10*time.Second
	evs := make([]event, events)
	for i := range evs {
		evs[i] = event{"order.created", "k" + itoa(i), 1}
	}
	o.enqueue(t, evs...)
	eventually(t, "the events in EVENTS", func() bool { return o.js.StreamMsgs(t, stream.Events) == events+1 })
	// The backlog: every event due in Postgres (the endpoint's durable,
	// created below, starts after them, so they are not read live).
	res, err := delivery.Replay(context.Background(), o.db.Pool, o.js.JS, e, delivery.ReplaySelector{FromSeq: 1}, false)
	if err != nil || res.Queued != events {
		t.Fatalf("replay: %+v %v, want %d queued", res, err, events)
	}
	o.instance(t, "", func(opts *delivery.Options) {
		delivery.SetBeforeSend(opts, func(string) error {
			// Prepared and not yet received: what waits in memory.
			n := prepared.Add(1) - received.Load()
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if n > 2*concurrency {
				once.Do(func() { close(tooMany) })
			}
			return nil
		})
	}, e)
	o.db.AwaitCount(t, 0, "SELECT count(*) FROM hookbridge.delivery_pending WHERE endpoint = 'slow'")
	if got := received.Load(); got != events {
		t.Errorf("the receiver got %d requests, want %d", got, events)
	}
	if m := most.Load(); m > 2*concurrency {
		t.Fatalf("%d deliveries were prepared and waiting at once, want at most twice the concurrency, %d", m, 2*concurrency)
	}
}
