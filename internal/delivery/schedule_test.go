package delivery_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/store"
)

// A restart during a retry wait resumes the schedule where it was: the
// attempt numbers go on, the wait before the third attempt is kept, and
// the dead letter comes after exactly len(retry) attempts in all.
// (Before, an ordered endpoint kept the count and the wait in memory: a
// restart started the schedule again.)
func TestRestartDuringRetryWaitResumesSchedule(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			t.Parallel()
			o, rc := newOrigin(t), newReceiver(t)
			rc.setFail(func(int, event) int { return http.StatusBadGateway })
			e := endpoint("partner", rc.url)
			e.Ordered = ordered
			const wait = 3 * time.Second
			e.Retry = []time.Duration{0, 100 * time.Millisecond, wait, 100 * time.Millisecond}
			first := o.start(t, e, nil)
			ids := o.enqueue(t, event{"order.created", "a", 1})
			eventually(t, "two attempts", func() bool { return len(rc.seen()) == 2 })
			// The second attempt's failure is written before the wait.
			if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_pending WHERE attempts = 2"); n != 1 {
				t.Fatalf("pending rows with 2 failed attempts = %d, want 1", n)
			}
			first()
			o.start(t, e, nil)

			if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE attempts = 4"); n != 1 {
				t.Fatalf("dead letters after 4 attempts = %d, want 1", n)
			}
			log := rc.seen()
			if len(log) != len(e.Retry) {
				t.Fatalf("receiver got %d requests, want %d", len(log), len(e.Retry))
			}
			if gap := log[2].at.Sub(log[1].at); gap < wait {
				t.Fatalf("third attempt %s after the second, want the schedule's %s kept across the restart", gap, wait)
			}
			if n := o.db.AwaitCount(t, 4, "SELECT count(*) FROM hookbridge.delivery_attempts"); n != 4 {
				t.Fatalf("%d attempt rows, want 4", n)
			}
			hist, err := store.DeliveryAttemptListForEvent(context.Background(), o.db.Pool, "partner", ids[0])
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range hist {
				if a.Attempt != i+1 {
					t.Fatalf("attempt rows %+v: numbers must go 1..4", hist)
				}
			}
			if len(hist) != 4 {
				t.Fatalf("%d attempt rows, want 4", len(hist))
			}
		})
	}
}

// Seed failure point: a failure before the send (the event's body or
// state cannot be read) makes no call; the event stays pending and is
// delivered once when the failure is gone.
func TestFailureBeforeSendMakesNoCall(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var broken atomic.Bool
	broken.Store(true)
	var tries atomic.Int32
	in := o.instance(t, "", func(opts *delivery.Options) {
		delivery.SetBeforeSend(opts, func(string) error {
			if broken.Load() {
				tries.Add(1)
				return errors.New("the body could not be read")
			}
			return nil
		})
	}, endpoint("partner", rc.url))
	_ = in
	o.enqueue(t, event{"order.created", "a", 1})
	eventually(t, "two failed preparations", func() bool { return tries.Load() >= 2 })
	if n := len(rc.seen()); n != 0 {
		t.Fatalf("receiver got %d requests while the delivery could not be prepared", n)
	}
	if n := o.attempts(t, "partner"); n != 0 {
		t.Fatalf("%d attempts recorded without a call", n)
	}
	// Pending: in JetStream, not settled.
	c, err := o.js.JS.Consumer(context.Background(), "EVENTS", delivery.ConsumerName("partner"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil || info.NumAckPending+int(info.NumPending) != 1 {
		t.Fatalf("consumer %+v %v: want the event pending", info, err)
	}
	broken.Store(false)

	eventually(t, "the delivery stored", func() bool { return rc.stored(t) == 1 })
	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_attempts WHERE attempt = 1 AND status_code = 202"); n != 1 {
		t.Fatalf("attempts = %d, want one, attempt 1", n)
	}
	if n := len(rc.seen()); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}
}

// An unordered endpoint whose receiver is slow never sends an event
// while another request with its webhook-id is in flight, and uses its
// schedule exactly: len(retry) requests per event. (Before, a message
// waiting for an HTTP slot could outlive its ack wait and be sent again
// concurrently, and the schedule ran out early.)
func TestSlowEndpointSendsEachAttemptOnce(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	rc.setFail(func(int, event) int { return http.StatusInternalServerError })
	rc.hold = 300 * time.Millisecond
	e := endpoint("partner", rc.url)
	e.Concurrency = 1
	e.Timeout = time.Second
	e.Retry = []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond}
	o.start(t, e, nil)
	const n = 8
	var evs []event
	for i := range n {
		evs = append(evs, event{"order.created", "k" + itoa(i), i})
	}
	o.enqueue(t, evs...)

	if got := o.db.AwaitCount(t, n, "SELECT count(*) FROM hookbridge.delivery_dead_letters"); got != n {
		t.Fatalf("dead letters = %d, want %d", got, n)
	}
	per := map[string]int{}
	for _, s := range rc.seen() {
		per[s.id]++
	}
	for id, k := range per {
		if k != len(e.Retry) {
			t.Errorf("%s requested %d times, want %d", id, k, len(e.Retry))
		}
	}
	if most, same := rc.concurrency(); most > e.Concurrency || same != 0 {
		t.Fatalf("receiver saw %d requests at once (concurrency %d) and %d sent again while in flight", most, e.Concurrency, same)
	}
}
