package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
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

// keyedEnv runs a keyed consumer "keyed" whose handler records every
// apply in effects, and fails an event marked "fail" permanently (it is
// dead-lettered at once) until fixed is set: the operator's fix.
type keyedEnv struct {
	db    *hookbridgetest.Database
	ns    *hookbridgetest.JetStream
	ops   *ops.Ops
	fixed *atomic.Bool
	seqs  map[string]uint64 // event id -> stream sequence
	stop  func()
}

type keyedBody struct {
	Key  string `json:"key"`
	V    int    `json:"v"`
	Fail bool   `json:"fail,omitempty"`
}

func newKeyedEnv(t *testing.T) *keyedEnv {
	t.Helper()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE effects (id bigserial PRIMARY KEY, event_id text NOT NULL, key text NOT NULL, v int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	e := &keyedEnv{db: db, ns: ns, fixed: new(atomic.Bool), seqs: map[string]uint64{}}
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		var b keyedBody
		if err := json.Unmarshal(ev.Body, &b); err != nil {
			return consumer.Permanent(err)
		}
		if b.Fail && !e.fixed.Load() {
			return consumer.Permanent(fmt.Errorf("%s cannot apply yet", ev.ID))
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, v) VALUES ($1, $2, $3)`, ev.ID, b.Key, b.V)
		return err
	})
	e.ops = &ops.Ops{Pool: db.Pool, JS: ns.JS, Consumers: []ops.Consumer{{Name: "keyed", Handler: h, EventTypes: []string{"thing.done"}}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "keyed", EventTypes: []string{"thing.done"}, Handler: h,
		Partitions: stream.DefaultPartitions, MaxDeliver: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stopped := false
	e.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consumer: %v", err)
			}
		}
	}
	t.Cleanup(e.stop)
	return e
}

// publish sends version v of key as the ingress would for a keyed source.
func (e *keyedEnv) publish(t *testing.T, key string, v int, fail bool) string {
	t.Helper()
	id := fmt.Sprintf("%s-v%d", key, v)
	raw, _ := json.Marshal(keyedBody{Key: key, V: v, Fail: fail})
	e.seqs[id] = e.ns.PublishKeyedHook(t, "demo", id, "thing.done", key, raw)
	return id
}

// settle waits until the consumer applied or dead-lettered every message
// sent and marked passed dead letters passed, then stops it, so that what
// follows is the operator's doing only.
func (e *keyedEnv) settle(t *testing.T, deadLetters, passed int) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, "every event applied or dead-lettered, passed ones marked", func() bool {
		return e.db.Count(t, `SELECT count(*) FROM hookbridge.inbox`)+e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) == len(e.seqs) &&
			e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) == deadLetters &&
			e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE passed_at IS NOT NULL`) == passed
	})
	e.stop()
	e.fixed.Store(true)
}

func (e *keyedEnv) deadLetterID(t *testing.T, eventID string) int64 {
	t.Helper()
	var id int64
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT id FROM hookbridge.dead_letters WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *keyedEnv) applied(t *testing.T, eventID string) int {
	t.Helper()
	return e.db.Count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, eventID)
}

// A keyed dead letter that a later event of its key has passed is not
// requeued by default: the refusal names the event that passed it and
// nothing is applied; with the override it applies and the result says it
// was out of order. A keyed dead letter nothing passed requeues as before.
func TestRequeueOfPassedDeadLetter(t *testing.T) {
	t.Parallel()
	e := newKeyedEnv(t)
	passedID := e.publish(t, "k1", 1, true)
	laterID := e.publish(t, "k1", 2, false)
	loneID := e.publish(t, "k2", 1, true)
	e.settle(t, 2, 1)
	ctx := context.Background()
	passed, lone := e.deadLetterID(t, passedID), e.deadLetterID(t, loneID)

	_, err := e.ops.RequeueDeadLetter(ctx, passed, ops.RequeueOptions{})
	var pe *ops.PassedError
	if !errors.Is(err, ops.ErrOutOfOrder) || !errors.As(err, &pe) {
		t.Fatalf("requeue of a passed dead letter: %v, want a refusal (ErrOutOfOrder)", err)
	}
	if pe.PassedBy.EventID != laterID || pe.PassedBy.StreamSeq != e.seqs[laterID] || pe.PassedBy.At.IsZero() ||
		!strings.Contains(err.Error(), laterID) || !strings.Contains(err.Error(), fmt.Sprint("stream seq ", e.seqs[laterID])) {
		t.Fatalf("refusal %q (%+v): want it to name %s at seq %d and when it applied", err, pe.PassedBy, laterID, e.seqs[laterID])
	}
	if n := e.applied(t, passedID); n != 0 {
		t.Fatalf("%s applied %d times after a refused requeue", passedID, n)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolved_at IS NULL`, passed); n != 1 {
		t.Fatal("a refused requeue resolved the dead letter")
	}

	res, err := e.ops.RequeueDeadLetter(ctx, lone, ops.RequeueOptions{})
	if err != nil || res.Status != ops.StatusRequeued || res.OutOfOrder || e.applied(t, loneID) != 1 {
		t.Fatalf("requeue of an unpassed keyed dead letter = %+v, %v, applied %d; want requeued once, in order", res, err, e.applied(t, loneID))
	}

	res, err = e.ops.RequeueDeadLetter(ctx, passed, ops.RequeueOptions{OutOfOrder: true})
	if err != nil || res.Status != ops.StatusRequeued || !res.OutOfOrder || res.PassedBy == nil || res.PassedBy.EventID != laterID {
		t.Fatalf("requeue with the override = %+v, %v; want requeued, out of order, passed by %s", res, err, laterID)
	}
	if n := e.applied(t, passedID); n != 1 {
		t.Fatalf("%s applied %d times with the override, want 1", passedID, n)
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolution = 'requeued'`); n != 2 {
		t.Fatalf("%d dead letters resolved requeued, want 2", n)
	}
}

// `replay --dead-letters` leaves the passed dead letters alone (counted
// and listed), applies the others; its dry run reads them all and marks
// the passed ones; with the override the passed ones apply too.
func TestReplayDeadLettersSkipsPassed(t *testing.T) {
	t.Parallel()
	e := newKeyedEnv(t)
	// Interleaved, so the unpassed ones lie before, between and after the
	// passed ones' sequences.
	p1 := e.publish(t, "k1", 1, true)
	e.publish(t, "k1", 2, false)
	u1 := e.publish(t, "k2", 1, true)
	p2 := e.publish(t, "k3", 1, true)
	e.publish(t, "k3", 2, false)
	u2 := e.publish(t, "k4", 1, true)
	e.settle(t, 4, 2)
	ctx := context.Background()
	sel := ops.ReplaySelectors{DeadLetters: true}

	dry := sel
	dry.DryRun = true
	skippedNotes := 0
	sum, err := e.ops.Replay(ctx, "keyed", dry, func(it ops.ReplayItem) {
		if n := it.DryRunNote; n != nil && n.Skipped && n.PassedBy != nil && strings.Contains(n.Note, "leaves it alone") {
			skippedNotes++
		}
	})
	if err != nil || sum.New != 4 || skippedNotes != 2 || sum.PassedDeadLetters != 2 || sum.NewDeadLetters != 2 {
		t.Fatalf("dry run: %+v, %v, %d marked skipped; want 4 new, the 2 passed ones marked", sum, err, skippedNotes)
	}

	var planned uint64
	res, err := e.ops.ReplayWith(ctx, "keyed", sel, ops.ReplayHooks{Planned: func(n uint64) { planned = n }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed != 2 || res.Resolved != 2 || res.Selected != 2 || planned != 2 || len(res.SkippedPassed) != 2 {
		t.Fatalf("replay = %+v (planned %d); want the 2 unpassed processed and resolved, the 2 passed skipped", res, planned)
	}
	for i, want := range []string{p1, p2} {
		if s := res.SkippedPassed[i]; s.EventID != want || s.ID != e.deadLetterID(t, want) || !strings.HasSuffix(s.PassedBy.EventID, "-v2") {
			t.Errorf("skipped[%d] = %+v, want %s passed by its key's v2", i, s, want)
		}
	}
	for id, want := range map[string]int{p1: 0, p2: 0, u1: 1, u2: 1} {
		if n := e.applied(t, id); n != want {
			t.Errorf("%s applied %d times, want %d", id, n, want)
		}
	}

	res, err = e.ops.ReplayWith(ctx, "keyed", ops.ReplaySelectors{DeadLetters: true, OutOfOrder: true}, ops.ReplayHooks{})
	if err != nil || res.Processed != 2 || len(res.SkippedPassed) != 0 {
		t.Fatalf("replay with the override = %+v, %v; want the 2 passed ones processed", res, err)
	}
	for _, id := range []string{p1, p2, u1, u2} {
		if n := e.applied(t, id); n != 1 {
			t.Errorf("%s applied %d times, want 1", id, n)
		}
	}
	if n := e.db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL`); n != 0 {
		t.Errorf("%d dead letters left unresolved", n)
	}
}
