package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// A batch that is formed while every worker is busy waits for one. It is
// out of the queue by then, so the queue's in-progress acks no longer
// cover it, and it is not being applied yet; it must still be kept from
// being redelivered when the wait is longer than ack_wait.
func TestBatchWaitingForAWorkerIsNotRedelivered(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)

	var (
		mu        sync.Mutex
		redeliver []string
		calls     atomic.Int32
	)
	release := make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if calls.Add(1) == 1 {
			<-release // the one worker is busy for several ack_waits
		}
		if ev.NumDelivered != 1 {
			mu.Lock()
			redeliver = append(redeliver, fmt.Sprintf("%s(%d)", ev.ID, ev.NumDelivered))
			mu.Unlock()
		}
		return nil
	})
	var outcomes outcomeCount // a redelivery the inbox answers duplicate counts too
	startConsumer(t, db, ns, 1, engine.Options{
		Name: "waiting", EventTypes: []string{"thing.done"}, Handler: h, Tracer: &outcomes,
		Concurrency: 1, AckWait: time.Second, HandlerTimeout: 30 * time.Second,
	})
	ns.PublishHook(t, "demo", "first", "thing.done", []byte(`{}`))
	hookbridgetest.Eventually(t, time.Minute, "the worker busy", func() bool { return calls.Load() >= 1 })
	for i := range 3 {
		ns.PublishHook(t, "demo", fmt.Sprintf("e%d", i), "thing.done", []byte(`{}`))
	}
	hookbridgetest.Eventually(t, time.Minute, "the three delivered while the worker is busy", func() bool {
		info := consumerInfo(t, ns, "waiting")
		return info.NumPending == 0 && info.NumAckPending == 4
	})
	time.Sleep(3500 * time.Millisecond) // three ack_waits and a half pass while they wait
	close(release)
	hookbridgetest.Eventually(t, time.Minute, "every event applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == 4
	})
	// Every message acked: no redelivery can come any more, and any that
	// came counts in the durable's deliveries. The tracer hears of an
	// apply after its commit.
	info := awaitSettled(t, ns, "waiting")
	hookbridgetest.Eventually(t, time.Minute, "the four applies traced", func() bool { return outcomes.applied.Load() >= 4 })
	mu.Lock()
	defer mu.Unlock()
	if n := outcomes.applied.Load(); n != 4 || len(redeliver) != 0 || calls.Load() != 4 || info.Delivered.Consumer != 4 {
		t.Fatalf("%d deliveries applied or found duplicate, %d handler calls and %d deliveries for 4 events; applied on a redelivery: %v",
			n, calls.Load(), info.Delivered.Consumer, redeliver)
	}
}

// sizes is a BatchHandler that records the size of each batch it applies
// and holds the first HandleBatch call until release is closed.
type sizes struct {
	mu      sync.Mutex
	batches []int
	held    bool // the first HandleBatch call is (or was) held
	release chan struct{}
}

// Handle is how a batch of one event is applied.
func (s *sizes) Handle(context.Context, pgx.Tx, consumer.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, 1)
	return nil
}

func (s *sizes) HandleBatch(_ context.Context, _ pgx.Tx, evs []consumer.Event) error {
	s.mu.Lock()
	s.batches = append(s.batches, len(evs))
	first := !s.held
	s.held = true
	s.mu.Unlock()
	if first {
		<-s.release
	}
	return nil
}

func (s *sizes) holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (s *sizes) get() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.batches...)
}

// A batch that is not full waits its whole batch_wait: another batch
// ending meanwhile (which nudges the batching loop) does not cut it short.
func TestBatchWaitIsNotCutShortByAnotherBatchEnding(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	h := &sizes{release: make(chan struct{})}
	// Stored before the consumer starts, so they make one full batch.
	ns.PublishHook(t, "demo", "e1", "thing.done", []byte(`{}`))
	ns.PublishHook(t, "demo", "e2", "thing.done", []byte(`{}`))
	// A batch_wait far longer than the steps below take on a loaded
	// machine (and under a third of the ack wait, which New requires);
	// a batch of two goes as soon as it is full.
	startConsumer(t, db, ns, 2, engine.Options{
		Name: "wait", EventTypes: []string{"thing.done"}, Handler: h,
		Concurrency: 2, BatchWait: 20 * time.Second, AckWait: 2 * time.Minute,
	})
	hookbridgetest.Eventually(t, time.Minute, "the first batch applying", h.holding)
	ns.PublishHook(t, "demo", "e3", "thing.done", []byte(`{}`)) // a batch of one, waiting up to 20s
	hookbridgetest.Eventually(t, time.Minute, "e3 delivered", func() bool { return consumerInfo(t, ns, "wait").NumAckPending == 3 })
	close(h.release) // the first batch ends
	hookbridgetest.Eventually(t, time.Minute, "the first batch committed", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") >= 2
	})
	ns.PublishHook(t, "demo", "e4", "thing.done", []byte(`{}`)) // still within e3's batch_wait
	hookbridgetest.Eventually(t, time.Minute, "every event applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == 4
	})
	if got := fmt.Sprint(h.get()); got != "[2 2]" {
		t.Fatalf("batches %s, want [2 2]: e3's batch should have waited for e4", got)
	}
}

// On shutdown the consumer applies what it holds (the batch being
// applied, the queue, a partial batch waiting for it) and acks each
// message after its commit: once Run has returned and the acks are
// flushed, nothing is left unacknowledged, and every delivered event is
// in the inbox once.
func TestShutdownAppliesAndAcksWhatItHolds(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	h := &sizes{release: make(chan struct{})}
	for i := range 4 { // stored before the consumer starts: one full batch
		ns.PublishHook(t, "demo", fmt.Sprintf("a%d", i), "thing.done", []byte(`{}`))
	}
	c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "stop", EventTypes: []string{"thing.done"}, Handler: h,
		Concurrency: 2, BatchSize: 4, BatchWait: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	hookbridgetest.Eventually(t, time.Minute, "the first batch applying", h.holding)
	const more = 7 // a full batch, and a partial one still in its batch_wait at shutdown
	for i := range more {
		ns.PublishHook(t, "demo", fmt.Sprintf("b%d", i), "thing.done", []byte(`{}`))
	}
	hookbridgetest.Eventually(t, time.Minute, "every message delivered", func() bool {
		info := consumerInfo(t, ns, "stop")
		return info.NumPending == 0 && info.NumAckPending == 4+more
	})
	cancel()
	time.Sleep(200 * time.Millisecond)
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := ns.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	cons, err := ns.JS.Consumer(context.Background(), "HOOKS", "stop")
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	hookbridgetest.Eventually(t, time.Minute, "no message left unacknowledged", func() bool {
		info, err = cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0
	})
	delivered := 4 + more - int(info.NumPending)
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != delivered {
		t.Fatalf("inbox rows %d, delivered %d (pending %d)", n, delivered, info.NumPending)
	}
	total := 0
	for _, n := range h.get() {
		total += n
	}
	if total != delivered {
		t.Fatalf("events applied %d (batches %v), delivered %d", total, h.get(), delivered)
	}
}
