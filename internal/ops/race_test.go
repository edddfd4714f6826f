package ops_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// gateEnv is a consumer "gated" whose handler writes one row per apply to
// effects and, while gate is armed, waits in the middle of its
// transaction until released.
type gateEnv struct {
	db      *hookbridgetest.Database
	ns      *hookbridgetest.JetStream
	ops     *ops.Ops
	entered chan struct{}
	release chan struct{}
}

func newGateEnv(t *testing.T) *gateEnv {
	t.Helper()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE effects (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	e := &gateEnv{db: db, ns: ns, entered: make(chan struct{}, 8), release: make(chan struct{})}
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, ev.ID); err != nil {
			return err
		}
		e.entered <- struct{}{}
		select {
		case <-e.release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	e.ops = &ops.Ops{Pool: db.Pool, JS: ns.JS, Consumers: []ops.Consumer{{Name: "gated", Handler: h, EventTypes: []string{"thing.done"}}}}
	return e
}

// deadLetter stores an event in HOOKS and records it dead-lettered for
// the gated consumer.
func (e *gateEnv) deadLetter(t *testing.T, eventID string) int64 {
	t.Helper()
	body := []byte(`{"n":1}`)
	seq := e.ns.PublishHook(t, "demo", eventID, "thing.done", body)
	err := engine.RecordDeadLetter(context.Background(), e.db.Pool, engine.DeadLetter{Consumer: "gated", Source: "demo",
		EventID: eventID, EventType: "thing.done", StreamSeq: seq, Deliveries: 5, Reason: engine.ReasonMaxDeliver,
		LastError: "boom", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT id FROM hookbridge.dead_letters WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *gateEnv) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-e.entered:
	case <-time.After(time.Minute):
		t.Fatal("the requeue never reached the handler")
	}
}

// awaitLanded waits until a second action on the dead letter has landed
// while the first one applies: it has returned (done), or it waits for a
// lock the apply holds.
func (e *gateEnv) awaitLanded(t *testing.T, done *atomic.Bool) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, "the second action done or waiting for the apply", func() bool {
		return done.Load() || e.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
}

// A discard that lands while a requeue of the same dead letter is
// applying must not leave a row marked "discarded" whose event applied:
// either the requeue wins (applied, "requeued", the discard answers
// already_resolved) or the discard does (nothing applied).
func TestDiscardDuringRequeue(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t)
	id := e.deadLetter(t, "d1")
	ctx := context.Background()

	type requeued struct {
		res ops.RequeueResult
		err error
	}
	rq := make(chan requeued, 1)
	go func() {
		res, err := e.ops.RequeueDeadLetter(ctx, id, ops.RequeueOptions{})
		rq <- requeued{res, err}
	}()
	e.waitEntered(t)

	type discarded struct {
		status string
		err    error
	}
	dc := make(chan discarded, 1)
	var returned atomic.Bool
	go func() {
		status, err := e.ops.DiscardDeadLetter(ctx, id, "not wanted")
		returned.Store(true)
		dc <- discarded{status, err}
	}()
	e.awaitLanded(t, &returned) // the discard lands mid-apply
	close(e.release)

	r := <-rq
	d := <-dc
	if d.err != nil {
		t.Fatalf("discard: %v", d.err)
	}
	effects := e.db.Count(t, `SELECT count(*) FROM effects WHERE event_id = 'd1'`)
	inbox := e.db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'gated' AND event_id = 'd1'`)
	var resolution string
	if err := e.db.Pool.QueryRow(ctx, `SELECT coalesce(resolution, '') FROM hookbridge.dead_letters WHERE id = $1`, id).Scan(&resolution); err != nil {
		t.Fatal(err)
	}
	t.Logf("requeue %+v (%v), discard %q, resolution %q, effects %d, inbox %d", r.res, r.err, d.status, resolution, effects, inbox)
	switch resolution {
	case engine.ResolutionRequeued:
		if r.err != nil || r.res.Status != ops.StatusRequeued || d.status != ops.StatusAlreadyResolved || effects != 1 || inbox != 1 {
			t.Fatal("requeued row: want the requeue to answer requeued, the discard already_resolved, one effect")
		}
	case engine.ResolutionDiscarded:
		if effects != 0 || inbox != 0 {
			t.Fatalf("the row is marked discarded but its event applied (%d effect(s), %d inbox row(s))", effects, inbox)
		}
		if d.status != ops.StatusDiscarded || r.res.Status == ops.StatusRequeued {
			t.Fatal("discarded row: want the discard to answer discarded and the requeue not requeued")
		}
	default:
		t.Fatalf("resolution %q, want requeued or discarded", resolution)
	}
}

// Two requeues of one dead letter at once apply its event once, and
// exactly one of them answers requeued.
func TestConcurrentRequeuesApplyOnce(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t)
	id := e.deadLetter(t, "r1")
	ctx := context.Background()
	type requeued struct {
		res ops.RequeueResult
		err error
	}
	rq := make(chan requeued, 2)
	var returned atomic.Bool
	for range 2 {
		go func() {
			res, err := e.ops.RequeueDeadLetter(ctx, id, ops.RequeueOptions{})
			returned.Store(true)
			rq <- requeued{res, err}
		}()
	}
	e.waitEntered(t)
	e.awaitLanded(t, &returned) // the other requeue lands while the first applies
	close(e.release)
	var statuses []string
	for range 2 {
		r := <-rq
		if r.err != nil {
			t.Fatalf("requeue: %v", r.err)
		}
		statuses = append(statuses, r.res.Status)
	}
	if !((statuses[0] == ops.StatusRequeued) != (statuses[1] == ops.StatusRequeued)) {
		t.Fatalf("statuses %v, want exactly one requeued", statuses)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM effects WHERE event_id = 'r1'`); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolution = 'requeued'`, id); n != 1 {
		t.Fatal("the dead letter is not resolved requeued")
	}
}

// After HOOKS was recreated, one stream sequence can name two dead
// letters of a consumer: an old event's and the new message's. Requeueing
// the new one resolves that row only; the old one, never applied, stays
// unresolved.
func TestRequeueResolvesOnlyItsOwnRowAtASequence(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t)
	close(e.release)
	ctx := context.Background()
	id := e.deadLetter(t, "new1")
	var seq int64
	if err := e.db.Pool.QueryRow(ctx, `SELECT stream_seq FROM hookbridge.dead_letters WHERE id = $1`, id).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	err := engine.RecordDeadLetter(ctx, e.db.Pool, engine.DeadLetter{Consumer: "gated", Source: "demo",
		EventID: "old1", EventType: "thing.done", StreamSeq: uint64(seq), Deliveries: 5, Reason: engine.ReasonMaxDeliver,
		LastError: "boom", Body: []byte(`{"old":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.ops.RequeueDeadLetter(ctx, id, ops.RequeueOptions{})
	if err != nil || res.Status != ops.StatusRequeued {
		t.Fatalf("requeue = %+v, %v", res, err)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM effects`); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE event_id = 'old1' AND resolved_at IS NULL`); n != 1 {
		t.Fatal("the old event's dead letter at the same sequence was resolved, though it never applied")
	}
}
