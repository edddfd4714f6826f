package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/failat"
)

// batchSizes are the batch sizes every consumer test runs at: the
// default (the set-wise path) and 1 (a transaction per event).
var batchSizes = []int{engine.DefaultBatchSize, 1}

// forBatchSizes runs f as a parallel subtest at each of batchSizes.
func forBatchSizes(t *testing.T, f func(t *testing.T, bs int)) {
	t.Helper()
	for _, bs := range batchSizes {
		t.Run(fmt.Sprintf("batch=%d", bs), func(t *testing.T) {
			t.Parallel()
			f(t, bs)
		})
	}
}

// startConsumer runs a consumer with batch size bs until the test ends;
// the test fails if Run returns an error.
func startConsumer(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, bs int, opts engine.Options) {
	t.Helper()
	opts.BatchSize = bs
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := engine.New(db.Pool, ns.JS, opts)
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer run: %v", err)
		}
	})
}

// startThingDone runs a consumer named name for "thing.done" at batch
// size bs with handler h, max_deliver maxDeliver and a 20ms backoff, then
// publishes one such event (id e1, body {}) on a server of its own, which
// it returns.
func startThingDone(t *testing.T, db *hookbridgetest.Database, bs int, name string, maxDeliver int, h consumer.Handler) *hookbridgetest.JetStream {
	t.Helper()
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	startConsumer(t, db, ns, bs, engine.Options{
		Name: name, EventTypes: []string{"thing.done"}, Handler: h,
		MaxDeliver: maxDeliver, Backoff: []time.Duration{20 * time.Millisecond},
	})
	ns.PublishHook(t, "demo", "e1", "thing.done", []byte(`{}`))
	return ns
}

// ordersOptions is the demo consumer with a fast retry schedule.
func ordersOptions(name string, maxDeliver int) engine.Options {
	return engine.Options{
		Name:       name,
		EventTypes: []string{orders.Created, orders.Paid, orders.Cancelled},
		Handler:    countedOrders{orders.Handler(name)},
		MaxDeliver: maxDeliver,
		Backoff:    []time.Duration{50 * time.Millisecond},
		AckWait:    5 * time.Second,
	}
}

func TestIsTransient(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{fmt.Errorf("apply: %w", &pgconn.PgError{Code: "08003"}), true},
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation: the event's fault
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("mark: %w", orders.ErrUnknownOrder), false},
		{consumer.Permanent(&pgconn.PgError{Code: "40001"}), false},
		{context.DeadlineExceeded, false},
		{errors.New("boom"), false},
		{nil, false},
	}
	for _, c := range cases {
		if got := engine.IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A serialization failure on every delivery, far past max_deliver, never
// dead-letters: once the database stops failing, the event applies.
func TestTransientFailuresDoNotCountTowardMaxDeliver(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t)
		var calls atomic.Int64
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if calls.Add(1) <= 6 {
				return fmt.Errorf("update: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"})
			}
			return nil
		})
		startThingDone(t, db, bs, "flaky", 2, h)
		hookbridgetest.Eventually(t, time.Minute, "event applied", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == 1
		})
		if n := calls.Load(); n != 7 {
			t.Fatalf("handler ran %d times, want 7 (6 transient failures, 1 success)", n)
		}
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters"); n != 0 {
			t.Fatalf("dead letters = %d, want 0", n)
		}
	})
}

// With max_deliver 3, five serialization failures followed by an ordinary
// failure must not dead-letter the message: JetStream has delivered it six
// times, but only one failure was the event's. It is dead-lettered at the
// third ordinary failure (the eighth delivery), and its failure counter
// goes with it.
func TestOnlyOrdinaryFailuresCountTowardMaxDeliver(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t)
		var calls atomic.Int64
		counted := make(chan int, 16) // failures counted when each call began
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			n := calls.Add(1)
			if n <= 5 {
				return fmt.Errorf("update: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"})
			}
			var failures int
			if err := db.Pool.QueryRow(ctx, "SELECT coalesce(sum(failures), 0) FROM hookbridge.delivery_failures").Scan(&failures); err != nil {
				return err
			}
			counted <- failures
			return errors.New("ordinary failure")
		})
		ns := startThingDone(t, db, bs, "budget", 3, h)
		hookbridgetest.Eventually(t, time.Minute, "dead letter", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters") == 1
		})
		awaitSettled(t, ns, "budget") // terminated: a wrong redelivery would have come before
		if n := calls.Load(); n != 8 {
			t.Fatalf("handler ran %d times, want 8 (5 serialization failures, 3 ordinary ones)", n)
		}
		close(counted)
		var seen []int
		for n := range counted {
			seen = append(seen, n)
		}
		if fmt.Sprint(seen) != "[0 1 2]" {
			t.Fatalf("failures counted before each ordinary failure = %v, want [0 1 2]", seen)
		}
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE reason = 'max_deliver' AND deliveries = 8 AND last_error LIKE '%ordinary failure%'"); n != 1 {
			t.Fatalf("dead letters after the 8th delivery, for max_deliver = %d, want 1", n)
		}
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.delivery_failures"); n != 0 {
			t.Fatalf("failure counters left = %d, want 0", n)
		}
	})
}

// A counted failure followed by a success leaves no counter behind: it is
// deleted in the transaction that applies the event.
func TestFailureCounterGoesWithTheApply(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t)
		var calls atomic.Int64
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if calls.Add(1) <= 2 {
				return errors.New("not yet")
			}
			return nil
		})
		startThingDone(t, db, bs, "heal", 5, h)
		hookbridgetest.Eventually(t, time.Minute, "event applied", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == 1
		})
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.delivery_failures"); n != 0 {
			t.Fatalf("failure counters left after the apply = %d, want 0", n)
		}
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters"); n != 0 {
			t.Fatalf("dead letters = %d, want 0", n)
		}
	})
}

// terminator kills every backend of the test database (but its own)
// every so often (a random interval between two bounds) until stopped,
// and counts the backends it killed.
type terminator struct {
	stop   chan struct{}
	done   sync.WaitGroup
	killed atomic.Int64
	rounds atomic.Int64
}

func terminateBackends(t *testing.T, db *hookbridgetest.Database, minInterval, maxInterval time.Duration) *terminator {
	t.Helper()
	admin, err := pgx.Connect(context.Background(), hookbridgetest.AdminURL())
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	tm := &terminator{stop: make(chan struct{})}
	tm.done.Add(1)
	go func() {
		defer tm.done.Done()
		defer admin.Close(context.Background())
		for {
			select {
			case <-tm.stop:
				return
			case <-time.After(minInterval + rand.N(maxInterval-minInterval+1)):
			}
			var n int64
			err := admin.QueryRow(context.Background(), `
				SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
				FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db.Name).Scan(&n)
			if err != nil {
				t.Errorf("terminate backends: %v", err)
				return
			}
			tm.killed.Add(n)
			tm.rounds.Add(1)
		}
	}()
	t.Cleanup(tm.halt)
	return tm
}

func (tm *terminator) halt() {
	select {
	case <-tm.stop:
	default:
		close(tm.stop)
	}
	tm.done.Wait()
}

// Backends of the test database are terminated every 50–400 ms (at
// random) while 1,000 orders are published, for at least 6 s and until
// events have been applied under the storm (progress, not a rate: a
// loaded machine may apply a few a second under it, and none at all if
// every transaction takes longer than the gap between two rounds, hence
// the random gaps; the storm gives up, failing, after 2 minutes without
// one). After the storm every event is applied exactly
// once and nothing is dead-lettered, although max_deliver is only 2. The
// storm is bounded in time, not by the work: a slow machine makes the
// test take longer, never fail.
func TestTerminatedBackendsLoseNothing(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		const (
			n     = 1000
			storm = 6 * time.Second
		)
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		opts := ordersOptions("orders", 2)
		logs := &countingHandler{}
		opts.Logger = slog.New(logs)
		startConsumer(t, db, ns, bs, opts)

		tm := terminateBackends(t, db, 50*time.Millisecond, 400*time.Millisecond)
		stormEnds := time.Now().Add(storm)
		for i := range n {
			id := fmt.Sprintf("o%04d", i)
			ns.PublishHook(t, "demo", "c-"+id, orders.Created, orders.WebhookBody(orders.Created, id, 100))
			if i%100 == 99 {
				time.Sleep(50 * time.Millisecond) // spread the publishes over many terminations
			}
		}
		time.Sleep(time.Until(stormEnds))
		hookbridgetest.Eventually(t, 2*time.Minute, "an event applied under the storm", func() bool {
			return countRetrying(t, db, "SELECT count(*) FROM hookbridge.inbox") > 0
		})
		appliedInStorm := countRetrying(t, db, "SELECT count(*) FROM hookbridge.inbox")
		// halt returns after the last round of terminations.
		tm.halt()
		hookbridgetest.Eventually(t, 5*time.Minute, "all applied after the terminations", func() bool {
			return countRetrying(t, db, "SELECT count(*) FROM hookbridge.inbox") == n
		})
		awaitSettled(t, ns, "orders") // stragglers (redeliveries) finished
		// The pool's idle connections may have been terminated by that last
		// round (57P01 on the next query); the final counts use a connection
		// opened after the storm.
		count := freshCounter(t, db)
		if got := count("SELECT count(*) FROM hookbridge.inbox"); got != n {
			t.Fatalf("inbox rows = %d, want %d", got, n)
		}
		if got := count("SELECT count(*) FROM demo.orders"); got != n {
			t.Fatalf("orders = %d, want %d", got, n)
		}
		if got := count("SELECT count(*) FROM demo.orders WHERE version <> 1"); got != 0 {
			t.Fatalf("%d orders changed more than once", got)
		}
		if got := count("SELECT count(*) FROM hookbridge.outbox"); got != n {
			t.Fatalf("outbox rows = %d, want %d", got, n)
		}
		if got := count("SELECT count(*) FROM hookbridge.dead_letters"); got != 0 {
			t.Fatalf("dead letters = %d, want 0", got)
		}
		retried := logs.count("event failed on a transient database error, will retry")
		if tm.killed.Load() < 5 || retried == 0 {
			t.Fatalf("%d backends terminated in %d rounds, %d transient failures: the test proved nothing",
				tm.killed.Load(), tm.rounds.Load(), retried)
		}
		t.Logf("terminated %d backends in %d rounds; %d applied during the storm; %d transient failures retried",
			tm.killed.Load(), tm.rounds.Load(), appliedInStorm, retried)
	})
}

// countingHandler is a slog handler that counts records by message.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[r.Message]++
	return nil
}

func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

// freshCounter opens a connection of its own to db and returns a function
// that runs count(*) queries on it; the connection closes with the test.
func freshCounter(t *testing.T, db *hookbridgetest.Database) func(query string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return func(query string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(context.Background(), query).Scan(&n); err != nil {
			t.Fatalf("count %q: %v", query, err)
		}
		return n
	}
}

// countRetrying counts while backends are being terminated: a query that
// hits a terminated connection is simply tried again.
func countRetrying(t *testing.T, db *hookbridgetest.Database, query string) int {
	t.Helper()
	for {
		var n int
		err := db.Pool.QueryRow(context.Background(), query).Scan(&n)
		if err == nil {
			return n
		}
		if !engine.IsTransient(err) {
			t.Fatalf("count %q: %v", query, err)
		}
	}
}

// During a Postgres outage (the database refuses connections) the consumer
// pauses intake instead of nak-ing in a loop: a 2 s outage with a 50 ms
// backoff costs a handful of failed attempts, not one per message every
// 50 ms. Afterwards everything applies and nothing is dead-lettered.
func TestOutagePausesIntake(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		const n = 50
		db := hookbridgetest.Postgres(t, orders.Migrations())
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		logs := &countingHandler{}
		opts := ordersOptions("orders", 2)
		opts.Logger = slog.New(logs)
		startConsumer(t, db, ns, bs, opts)
		publish := func(from int) {
			for i := from; i < from+n; i++ {
				id := fmt.Sprintf("o%03d", i)
				ns.PublishHook(t, "demo", "c-"+id, orders.Created, orders.WebhookBody(orders.Created, id, 100))
			}
		}
		publish(0)
		hookbridgetest.Eventually(t, time.Minute, "first half applied", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == n
		})

		admin, err := pgx.Connect(context.Background(), hookbridgetest.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Close(context.Background()) })
		setConnections := func(allow bool) {
			t.Helper()
			if _, err := admin.Exec(context.Background(), fmt.Sprintf("ALTER DATABASE %s WITH ALLOW_CONNECTIONS %t", db.Name, allow)); err != nil {
				t.Fatal(err)
			}
		}
		setConnections(false)
		t.Cleanup(func() { setConnections(true) })
		if _, err := admin.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db.Name); err != nil {
			t.Fatal(err)
		}
		publish(n)
		// The outage lasts 2 s, and until the consumer has met it (a
		// loaded machine may not pull within 2 s).
		outageEnds := time.Now().Add(2 * time.Second)
		hookbridgetest.Eventually(t, time.Minute, "intake paused by the outage", func() bool {
			return logs.count("postgres unreachable; intake paused") > 0 && logs.count("event failed on a transient database error, will retry") > 0
		})
		time.Sleep(time.Until(outageEnds))
		failed := logs.count("event failed on a transient database error, will retry")
		paused := logs.count("postgres unreachable; intake paused")
		setConnections(true)

		hookbridgetest.Eventually(t, time.Minute, "second half applied", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == 2*n
		})
		if got := db.Count(t, "SELECT count(*) FROM demo.orders"); got != 2*n {
			t.Fatalf("orders = %d, want %d", got, 2*n)
		}
		if got := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters"); got != 0 {
			t.Fatalf("dead letters = %d, want 0", got)
		}
		// Without the pause (runner.hold unset) the same run measured 188
		// failed attempts at batch size 1: the buffered messages failing
		// every 50 ms. With the pause each message fails about once (the
		// ones pulled before the gate closed, at most all n on a loaded
		// machine whose pull was already in flight): a batch holding all
		// of them fails them all in one attempt.
		limit := n + n/5
		if bs > 1 {
			limit = 2 * n
		}
		if paused == 0 || failed == 0 || failed > limit {
			t.Fatalf("during the outage: %d transient failures, %d pauses; want a pause and at most %d failures", failed, paused, limit)
		}
		if logs.count("postgres reachable again; intake resumed") == 0 {
			t.Fatalf("intake never logged its resumption")
		}
		t.Logf("2 s outage: %d failed attempts, %d pause(s)", failed, paused)
	})
}

// An event that failed and then applied says so at info, with how many
// attempts it took: its "will retry" warnings have an end in the log.
func TestRecoveryIsLogged(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	var calls atomic.Int64
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if calls.Add(1) <= 2 {
			return errors.New("not yet")
		}
		return nil
	})
	var logs hookbridgetest.LogBuffer
	startConsumer(t, db, ns, 1, engine.Options{Name: "heal", EventTypes: []string{"thing.done"}, Handler: h, MaxDeliver: 5,
		Backoff: []time.Duration{20 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ns.PublishHook(t, "demo", "e1", "thing.done", []byte(`{}`))
	hookbridgetest.Eventually(t, time.Minute, "the recovery logged", func() bool {
		return strings.Contains(logs.String(), `level=INFO msg="event applied after retrying"`)
	})
	line := logs.String()[strings.Index(logs.String(), `msg="event applied after retrying"`):]
	line = line[:strings.Index(line, "\n")]
	if !strings.Contains(line, "event_id=e1") || !strings.Contains(line, "attempts=3") || !strings.Contains(line, "since_received=") {
		t.Fatalf("recovery line %q lacks the event id, attempts=3 or the time to apply", line)
	}
}

// countedOrders is the demo handler with its postponement of an unknown
// order's event turned into a plain failure: the tests of max_deliver,
// backoff and dead letters use it as a failure that counts.
type countedOrders struct{ *consumer.Mux }

func (h countedOrders) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	return counted(h.Mux.Handle(ctx, tx, ev))
}

func (h countedOrders) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	return counted(h.Mux.HandleBatch(ctx, tx, evs))
}

func counted(err error) error {
	if !consumer.IsPostponed(err) {
		return err
	}
	plain := fmt.Errorf("%s: %w", err.Error(), orders.ErrUnknownOrder)
	if fe := (*failat.Error)(nil); errors.As(err, &fe) {
		return &failat.Error{Lo: fe.Lo, Hi: fe.Hi, Err: plain}
	}
	return plain
}
