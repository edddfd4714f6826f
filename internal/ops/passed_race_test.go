package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A requeue of a keyed dead letter racing the live apply of a later event
// of its key. The later event marks the dead letter passed in its own
// transaction, under the row's lock, which the requeue takes too: either
// the later event commits first and the requeue, having waited, applies
// nothing and is refused; or the requeue commits first and the later
// event, having waited, applies after it and marks nothing.

// raceEnv runs a live keyed consumer "keyed" and serves requeues of its
// dead letters; its handler records every apply in effects, fails an event
// marked "fail" permanently until fixed, and waits in the middle of the
// apply of the event gated names until released.
type raceEnv struct {
	db      *hookbridgetest.Database
	ns      *hookbridgetest.JetStream
	ops     *ops.Ops
	fixed   atomic.Bool
	gated   atomic.Value // event id
	entered chan string
	release chan struct{}
	once    sync.Once
}

func newRaceEnv(t *testing.T) *raceEnv {
	t.Helper()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE effects (id bigserial PRIMARY KEY, event_id text NOT NULL, key text NOT NULL, v int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	e := &raceEnv{db: db, ns: ns, entered: make(chan string, 8), release: make(chan struct{})}
	e.gated.Store("")
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		var b keyedBody
		if err := json.Unmarshal(ev.Body, &b); err != nil {
			return consumer.Permanent(err)
		}
		if b.Fail && !e.fixed.Load() {
			return consumer.Permanent(fmt.Errorf("%s cannot apply yet", ev.ID))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, v) VALUES ($1, $2, $3)`, ev.ID, b.Key, b.V); err != nil {
			return err
		}
		if ev.ID == e.gated.Load() {
			e.entered <- ev.ID
			select {
			case <-e.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.ops = &ops.Ops{Pool: db.Pool, JS: ns.JS, Consumers: []ops.Consumer{{Name: "keyed", Handler: h, EventTypes: []string{"thing.done"},
		ApplyTimeout: 2 * time.Minute}}, Logger: quiet}
	c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "keyed", EventTypes: []string{"thing.done"}, Handler: h,
		Partitions: stream.DefaultPartitions, MaxDeliver: 1, HandlerTimeout: 2 * time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() { e.open(); cancel(); <-done })
	return e
}

// open lets the gated apply go on.
func (e *raceEnv) open() { e.once.Do(func() { close(e.release) }) }

func (e *raceEnv) publish(t *testing.T, key string, v int, fail bool) string {
	t.Helper()
	id := fmt.Sprintf("%s-v%d", key, v)
	raw, _ := json.Marshal(keyedBody{Key: key, V: v, Fail: fail})
	e.ns.PublishKeyedHook(t, "demo", id, "thing.done", key, raw)
	return id
}

// deadLetter publishes v1 of key failing, waits for its dead letter and
// returns its id; the handler applies it from then on.
func (e *raceEnv) deadLetter(t *testing.T, key string) (string, int64) {
	t.Helper()
	eventID := e.publish(t, key, 1, true)
	hookbridgetest.Eventually(t, time.Minute, "the dead letter", func() bool {
		return e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE event_id = $1`, eventID) == 1
	})
	e.fixed.Store(true)
	var id int64
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT id FROM hookbridge.dead_letters WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return eventID, id
}

func (e *raceEnv) waitEntered(t *testing.T, eventID string) {
	t.Helper()
	select {
	case got := <-e.entered:
		if got != eventID {
			t.Fatalf("%s entered the gate, want %s", got, eventID)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s never reached its handler", eventID)
	}
}

// awaitLockWait waits until a transaction waits for a row lock (the
// second of the racing applies), and checks that the requeue has not
// returned meanwhile.
func (e *raceEnv) awaitLockWait(t *testing.T, returned *atomic.Bool) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, "the second apply waiting for the first's row lock", func() bool {
		return returned.Load() || e.db.Count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	if returned.Load() {
		t.Fatal("the requeue returned without waiting for the apply that holds the dead letter's row")
	}
}

type requeued struct {
	res ops.RequeueResult
	err error
}

func (e *raceEnv) requeue(id int64, returned *atomic.Bool) chan requeued {
	out := make(chan requeued, 1)
	go func() {
		res, err := e.ops.RequeueDeadLetter(context.Background(), id, ops.RequeueOptions{})
		returned.Store(true)
		out <- requeued{res, err}
	}()
	return out
}

// The later event's apply holds the mark, uncommitted, when the requeue
// starts: the requeue waits for it, then finds the mark and applies
// nothing (refused, naming the later event), without --out-of-order.
func TestRequeueRacingALaterEventThatCommitsFirst(t *testing.T) {
	t.Parallel()
	e := newRaceEnv(t)
	deadID, id := e.deadLetter(t, "k1")
	laterID := fmt.Sprintf("k1-v%d", 2)
	e.gated.Store(laterID)
	e.publish(t, "k1", 2, false)
	e.waitEntered(t, laterID) // its claim and the mark ran; it has not committed

	var returned atomic.Bool
	rq := e.requeue(id, &returned)
	e.awaitLockWait(t, &returned)
	e.open()
	r := <-rq

	var pe *ops.PassedError
	if !errors.Is(r.err, ops.ErrOutOfOrder) || !errors.As(r.err, &pe) || pe.PassedBy.EventID != laterID {
		t.Fatalf("requeue = %+v, %v; want it refused, passed by %s", r.res, r.err, laterID)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, deadID); n != 0 {
		t.Fatalf("%s applied %d times after the later event", deadID, n)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolved_at IS NULL AND passed_by_event = $2`, id, laterID); n != 1 {
		t.Fatal("the dead letter is not left unresolved and marked passed by the later event")
	}
	if n := e.db.Count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, laterID); n != 1 {
		t.Fatalf("%s applied %d times, want 1", laterID, n)
	}
}

// The requeue's apply holds the dead letter's row, uncommitted, when the
// later event arrives: the later event waits for it, then applies after
// it and marks nothing; the requeue is in order.
func TestRequeueRacingALaterEventThatCommitsSecond(t *testing.T) {
	t.Parallel()
	e := newRaceEnv(t)
	deadID, id := e.deadLetter(t, "k1")
	e.gated.Store(deadID)
	var returned atomic.Bool
	rq := e.requeue(id, &returned)
	e.waitEntered(t, deadID) // the requeue locked the row and applies

	laterID := e.publish(t, "k1", 2, false)
	e.awaitLockWait(t, &returned)
	if n := e.db.Count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, laterID); n != 0 {
		t.Fatalf("%s committed while the requeue of an earlier event held its dead letter", laterID)
	}
	e.open()
	r := <-rq
	if r.err != nil || r.res.Status != ops.StatusRequeued || r.res.OutOfOrder {
		t.Fatalf("requeue = %+v, %v; want requeued, in order", r.res, r.err)
	}
	hookbridgetest.Eventually(t, time.Minute, "the later event applied", func() bool {
		return e.db.Count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, laterID) == 1
	})
	if n := e.db.Count(t, `SELECT count(*) FROM effects a JOIN effects b ON a.event_id = $1 AND b.event_id = $2 AND a.id < b.id`, deadID, laterID); n != 1 {
		t.Fatalf("%s did not apply before %s", deadID, laterID)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolution = 'requeued' AND passed_at IS NULL`, id); n != 1 {
		t.Fatal("the dead letter is not resolved requeued and unpassed")
	}
	if n := e.db.Count(t, `SELECT count(*) FROM effects`); n != 2 {
		t.Fatalf("%d effects, want 2 (each event once)", n)
	}
}
