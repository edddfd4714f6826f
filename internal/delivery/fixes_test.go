package delivery_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/store"
)

// skewedPool is a pool on o's database whose now() runs ahead of this
// process's clock by ahead: the database of an instance whose own clock
// is behind. Only now() moves; the data is the same.
func skewedPool(t *testing.T, o *origin, ahead time.Duration) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	_, err := o.db.Pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS skewed;
CREATE OR REPLACE FUNCTION skewed.now() RETURNS timestamptz LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.now() + make_interval(secs => `+itoa(int(ahead.Seconds()))+`) $$`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(o.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "skewed, pg_catalog"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var skew float64
	if err := pool.QueryRow(ctx, "SELECT extract(epoch FROM now() - clock_timestamp())").Scan(&skew); err != nil || skew < ahead.Seconds()-60 {
		t.Fatalf("the skewed pool's now() is %.0fs ahead (%v), want %s", skew, err, ahead)
	}
	return pool
}

// A key's next attempt is timed by the database's clock, which wrote it:
// with the database's clock an hour ahead of the instance's, a key whose
// first event failed once is still retried on its schedule and its later
// event follows.
func TestOrderedRetryFollowsDatabaseClock(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	pool := skewedPool(t, o, time.Hour)
	rc.setFail(func(n int, ev event) int {
		if ev.N == 1 && n == 0 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := endpoint("partner", rc.url)
	e.Ordered = true
	o.instance(t, "", func(opts *delivery.Options) { opts.Pool = pool }, e)
	o.enqueue(t, event{"order.created", "a", 1}, event{"order.paid", "a", 2})
	eventually(t, "a1 and a2 stored", func() bool { return rc.stored(t) == 2 })
	var order []int
	for _, s := range rc.seen() {
		if s.status == "accepted" {
			order = append(order, s.ev.N)
		}
	}
	if len(order) != 2 || order[0] != 1 || order[1] != 2 {
		t.Fatalf("accepted %v, want [1 2]", order)
	}
}

// A replay of an event before a key's dead letter does not make the
// reader forget that dead letter: the next later event of the key still
// passes it, so a requeue of it then needs the out-of-order flag.
func TestReplayBeforeDeadLetterKeepsItUnpassedUntilPassed(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	var refuse atomic.Bool
	refuse.Store(true)
	rc.setFail(func(_ int, ev event) int {
		if ev.N == 2 && refuse.Load() {
			return http.StatusBadGateway
		}
		return 0
	})
	e := endpoint("partner", rc.url)
	e.Ordered = true
	e.Retry = []time.Duration{0} // one attempt, then the dead letter
	o.start(t, e, nil)
	ids := o.enqueue(t, event{"order.created", "a", 1}, event{"order.paid", "a", 2})
	o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE event_id = $1 AND resolved_at IS NULL", ids[1])
	refuse.Store(false)
	ctx := context.Background()
	res, err := delivery.Replay(ctx, o.db.Pool, o.js.JS, e, delivery.ReplaySelector{EventIDs: ids[:1]}, false)
	if err != nil || res.Queued != 1 {
		t.Fatalf("replay of a1: %+v %v", res, err)
	}
	eventually(t, "a1's replay answered", func() bool { return len(rc.seen()) == 3 })
	o.db.AwaitCount(t, 0, "SELECT count(*) FROM hookbridge.delivery_pending")
	o.enqueue(t, event{"order.shipped", "a", 3})
	eventually(t, "a3 stored", func() bool { return rc.stored(t) == 2 })
	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE event_id = $1 AND passed_at IS NOT NULL", ids[1]); n != 1 {
		t.Fatalf("a2's dead letter passed = %d, want 1", n)
	}
	rq, err := delivery.Requeue(ctx, o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{Endpoint: e.Name}})
	if err != nil || len(rq.Done) != 0 || len(rq.Refused) != 1 {
		t.Fatalf("requeue of a2 after a3: %+v %v, want refused", rq, err)
	}
}

// The endpoint's failing clock stops at a success even when the first
// success after the failures could not record it: the next success does,
// so disable_after never counts failures from before a recovery.
func TestFailingClockClearsAfterRecovery(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	ctx := context.Background()
	// While a row of refuse_recovery exists, stopping the failing clock
	// fails (as a statement cut by a lost connection would); each refusal
	// is counted by a sequence, which no rollback undoes.
	_, err := o.db.Pool.Exec(ctx, `CREATE TABLE refuse_recovery (x int);
INSERT INTO refuse_recovery VALUES (1);
CREATE SEQUENCE recovery_refused;
CREATE FUNCTION refuse_recovery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.failing_since IS NOT NULL AND NEW.failing_since IS NULL AND EXISTS (SELECT 1 FROM refuse_recovery) THEN
		PERFORM nextval('recovery_refused');
		RAISE EXCEPTION 'recovery refused by the test';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse_recovery BEFORE UPDATE ON hookbridge.delivery_endpoints
	FOR EACH ROW EXECUTE FUNCTION refuse_recovery()`)
	if err != nil {
		t.Fatal(err)
	}
	rc.setFail(func(n int, ev event) int {
		if ev.N == 1 && n == 0 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := endpoint("partner", rc.url)
	o.start(t, e, nil)
	o.enqueue(t, event{"order.created", "a", 1})
	eventually(t, "a1 stored after one failure", func() bool { return rc.stored(t) == 1 })
	o.db.AwaitCount(t, 1, "SELECT count(*) FROM recovery_refused WHERE is_called")
	if _, err := o.db.Pool.Exec(ctx, "DELETE FROM refuse_recovery"); err != nil {
		t.Fatal(err)
	}
	o.enqueue(t, event{"order.created", "b", 2})
	eventually(t, "b2 stored", func() bool { return rc.stored(t) == 2 })
	if n := o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_endpoints WHERE name = $1 AND failing_since IS NULL", e.Name); n != 1 {
		t.Fatal("the failing clock still runs after successes")
	}
}

// A requeue racing the end of its key's last pending delivery (the
// requeue's statement saw the row, the row's end did not see the
// requeue) still becomes due and is delivered once. The race is forced:
// the requeue waits on its dead letter's row lock while the key's row
// ends.
func TestRequeueRacingEndOfKeyIsDelivered(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	ctx := context.Background()
	e := endpoint("partner", rc.url)
	e.Ordered = true
	const subject, key = "events.orders.a", "s:events.orders.a"
	b := &pgx.Batch{}
	store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{Endpoint: e.Name, EventID: "evt-a-1", Subject: subject,
		StreamSeq: 1000, Attempts: 1, LastStatus: 502, LastErrorClass: "status",
		Payload: []byte(`{"type":"order.created","key":"a","n":1}`), Headers: map[string]string{"Content-Type": "application/json"},
		OrderingKey: key})
	if err := o.db.Pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	var dl int64
	if err := o.db.Pool.QueryRow(ctx, "SELECT id FROM hookbridge.delivery_dead_letters").Scan(&dl); err != nil {
		t.Fatal(err)
	}
	// The key's last pending delivery, being sent.
	if n, err := store.DeliveryPendingReplay(ctx, o.db.Pool, e.Name, true,
		[]store.DeliveryPending{{StreamSeq: 1001, EventID: "evt-a-2", Subject: subject, OrderingKey: key}}); err != nil || n != 1 {
		t.Fatalf("pending row: %d %v", n, err)
	}
	lock, err := o.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck // ended below
	if _, err := lock.Exec(ctx, "SELECT 1 FROM hookbridge.delivery_dead_letters WHERE id = $1 FOR UPDATE", dl); err != nil {
		t.Fatal(err)
	}
	type requeued struct {
		res delivery.RequeueResult
		err error
	}
	done := make(chan requeued, 1)
	go func() {
		res, err := delivery.Requeue(ctx, o.db.Pool, delivery.RequeueOptions{Filter: store.DeliveryDeadLetterFilter{IDs: []int64{dl}}})
		done <- requeued{res, err}
	}()
	// The requeue's statement waits for the dead letter's lock (its
	// snapshot, which holds the key's row, is taken).
	o.db.AwaitCount(t, 1, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "+
		"AND query LIKE '%UPDATE hookbridge.delivery_dead_letters%requeued%'")
	if _, err := store.DeliveryPendingDone(ctx, o.db.Pool, e.Name, 1001, key); err != nil {
		t.Fatal(err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var r requeued
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the requeue did not end within a minute")
	}
	if r.err != nil || len(r.res.Done) != 1 {
		t.Fatalf("requeue %+v %v", r.res, r.err)
	}
	o.start(t, e, nil)
	eventually(t, "the requeue delivered", func() bool { return rc.stored(t) == 1 })
	o.db.AwaitCount(t, 0, "SELECT count(*) FROM hookbridge.delivery_pending")
	if n := len(rc.seen()); n != 1 {
		t.Fatalf("%d requests, want the requeue's one", n)
	}
}

// An endpoint URL's path and query may carry a token (many webhook URLs
// are secret by their path): what status shows of it keeps the scheme
// and host only.
func TestStatusShowsRedactedURL(t *testing.T) {
	t.Parallel()
	const secretURL = "https://hooks.example.com:8443/services/T0/B0/s3cr3t-token?sig=abc#frag"
	e := endpoint("partner", secretURL)
	if got, want := e.DisplayURL(), "https://hooks.example.com:8443/…"; got != want {
		t.Fatalf("DisplayURL %q, want %q", got, want)
	}
	if got := endpoint("root", "https://hooks.example.com/").DisplayURL(); got != "https://hooks.example.com/" {
		t.Fatalf("DisplayURL of a bare host %q", got)
	}
	o := newOrigin(t)
	st, err := delivery.Status(context.Background(), o.db.Pool, o.js.JS, []delivery.Endpoint{e})
	if err != nil || len(st) != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
	if st[0].URL != "https://hooks.example.com:8443/…" {
		t.Fatalf("status shows the URL %q", st[0].URL)
	}
}

// A process that stops after a dead letter is committed and before its
// message is terminated leaves the message to be redelivered: the next
// reader finds its dead letter and terminates it, without sending it
// again (its schedule is spent).
func TestDeadLetterCommittedBeforeTermIsNotSentAgain(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	rc.setFail(func(int, event) int { return http.StatusBadGateway })
	e := endpoint("partner", rc.url)
	e.Retry = []time.Duration{0} // one attempt, then the dead letter
	var crashed atomic.Bool
	first := o.instance(t, "first", func(opts *delivery.Options) {
		delivery.SetAfterDeadLetter(opts, func(string) bool { crashed.Store(true); return true })
	}, e)
	o.enqueue(t, event{"order.created", "a", 1})
	eventually(t, "the dead letter committed and the process stopped", crashed.Load)
	first.kill()
	o.instance(t, "second", nil, e)
	ctx := context.Background()
	eventually(t, "the message redelivered and settled", func() bool {
		c, err := o.js.JS.Consumer(ctx, "EVENTS", delivery.ConsumerName(e.Name))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.Delivered.Consumer >= 2 && info.NumAckPending == 0 && info.NumPending == 0
	})
	o.db.AwaitCount(t, 0, "SELECT count(*) FROM hookbridge.delivery_pending")
	if n := len(rc.seen()); n != 1 {
		t.Fatalf("%d requests, want the schedule's one", n)
	}
	if n := o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE resolved_at IS NULL"); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}

// A key's dead letter is passed only by a later event that is really
// sent: one whose attempt could not start (its lease lapsed, say) passes
// nothing, so the dead letter may still be requeued in order.
func TestDeadLetterPassedOnlyBySentEvent(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	ctx := context.Background()
	e := endpoint("partner", rc.url)
	e.Ordered = true
	const subject, key = "events.orders.a", "s:events.orders.a"
	// a1's dead letter, before any event of the test (the warm-up is
	// sequence 1).
	b := &pgx.Batch{}
	store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{Endpoint: e.Name, EventID: "evt-a-0", Subject: subject,
		StreamSeq: 1, Attempts: 1, LastStatus: 502, LastErrorClass: "status", Payload: []byte(`{}`), OrderingKey: key})
	if err := o.db.Pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	second, release := make(chan struct{}), make(chan struct{})
	o.instance(t, "", func(opts *delivery.Options) {
		delivery.SetMayStart(opts, func(string) bool {
			switch calls.Add(1) {
			case 1:
				return false // the first attempt cannot start
			case 2:
				close(second)
				<-release
			}
			return true
		})
	}, e)
	o.enqueue(t, event{"order.paid", "a", 1})
	select {
	case <-second:
	case <-time.After(time.Minute):
		t.Fatal("no second start within a minute")
	}
	passed := o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE passed_at IS NOT NULL")
	close(release)
	if passed != 0 {
		t.Fatal("the dead letter was passed by an attempt that did not start")
	}
	eventually(t, "a1 stored", func() bool { return rc.stored(t) == 1 })
	o.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE passed_at IS NOT NULL")
}
