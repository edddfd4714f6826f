package engine_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

func reviewEvent(id string, seq uint64) consumer.Event {
	body := orders.WebhookBody(orders.Created, "o-"+id, 100)
	return consumer.Event{Source: "demo", ID: id, Type: orders.Created, Body: body, BodySHA256: sha256.Sum256(body),
		StreamSeq: seq, NumDelivered: 1}
}

// TestSetwiseTransientHandlerErrorFailsOnlyItsEvent: a handler statement
// that fails with a transient SQLSTATE (a deadlock with another writer of
// the same business row) for one event, while the database answers, fails
// that event only, as at batch size 1; the other events of the batch are
// applied, not nak'd with it.
func TestSetwiseTransientHandlerErrorFailsOnlyItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := orders.Handler("orders")
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if ev.ID == "e-5" {
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'lock cycle' USING ERRCODE = '40P01'; END $$`)
			return err
		}
		return inner.Handle(ctx, tx, ev)
	})
	var evs []consumer.Event
	for i := range 10 {
		evs = append(evs, reviewEvent(fmt.Sprintf("e-%d", i), uint64(i+1)))
	}
	for _, mode := range []string{"per-event", "set-wise"} {
		db := hookbridgetest.Postgres(t, orders.Migrations())
		var outs []consumer.Result
		if mode == "set-wise" {
			outs = engine.ApplyBatch(ctx, db.Pool, "orders", h, evs)
		} else {
			for _, ev := range evs {
				out, err := engine.Apply(ctx, db.Pool, "orders", h, ev)
				outs = append(outs, consumer.Result{Outcome: out, Err: err})
			}
		}
		for i, r := range outs {
			want := consumer.Processed
			if evs[i].ID == "e-5" {
				want = consumer.Failed
				if !engine.IsTransient(r.Err) {
					t.Errorf("%s: %s: err %v, want a transient one", mode, evs[i].ID, r.Err)
				}
			}
			if r.Outcome != want {
				t.Errorf("%s: %s: %v (%v), want %v", mode, evs[i].ID, r.Outcome, r.Err, want)
			}
		}
		if n := db.Count(t, `SELECT count(*) FROM hookbridge.inbox`); n != 9 {
			t.Errorf("%s: %d inbox rows, want 9", mode, n)
		}
	}
}

// TestFailureCountDuringConcurrentApplyLeavesNoCounter: after an ack_wait
// expiry one delivery of a message can fail while another is applying it.
// The failed one's counter must not outlive the apply that commits.
func TestFailureCountDuringConcurrentApplyLeavesNoCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ev := reviewEvent("e-race", 7)
	ev.NumDelivered = 2
	inner := orders.Handler("orders")
	started, release := make(chan struct{}), make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		close(started)
		<-release
		return inner.Handle(ctx, tx, ev)
	})
	applied := make(chan consumer.Result, 1)
	go func() {
		out, err := engine.Apply(ctx, db.Pool, "orders", h, ev)
		applied <- consumer.Result{Outcome: out, Err: err}
	}()
	<-started
	counted := make(chan error, 1)
	go func() {
		_, err := engine.CountFailure(ctx, db.Pool, "orders", ev, errors.New("handler failed on the other delivery"))
		counted <- err
	}()
	// The count runs while the apply is open: it ends, or it waits for
	// the apply's lock.
	var countErr error
	countDone := false
	hookbridgetest.Eventually(t, time.Minute, "the count done or waiting for the apply", func() bool {
		select {
		case countErr = <-counted:
			countDone = true
			return true
		default:
		}
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	close(release)
	if r := <-applied; r.Outcome != consumer.Processed {
		t.Fatalf("apply: %v %v", r.Outcome, r.Err)
	}
	if !countDone {
		countErr = <-counted
	}
	if countErr != nil {
		t.Fatalf("count: %v", countErr)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures`); n != 0 {
		t.Errorf("%d failure counters left behind by an applied message, want 0", n)
	}
}

// TestEmptyBodyConflictMatchesSetwise: a conflicting repeat with an
// empty body is recorded as a conflict on both paths (the column is NOT
// NULL; an empty body must not become NULL).
func TestEmptyBodyConflictMatchesSetwise(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return nil })
	orig := consumer.Event{Source: "demo", ID: "e-empty", Type: "t", Body: []byte("x"), BodySHA256: sha256.Sum256([]byte("x")), StreamSeq: 1, NumDelivered: 1}
	empty := consumer.Event{Source: "demo", ID: "e-empty", Type: "t", BodySHA256: sha256.Sum256(nil), StreamSeq: 2, NumDelivered: 1}
	for _, setwise := range []bool{false, true} {
		db := hookbridgetest.Postgres(t)
		if out, err := engine.Apply(ctx, db.Pool, "c", h, orig); out != consumer.Processed {
			t.Fatalf("apply: %v %v", out, err)
		}
		var r consumer.Result
		if setwise {
			r = engine.ApplyBatch(ctx, db.Pool, "c", h, []consumer.Event{empty, empty})[0]
		} else {
			out, err := engine.Apply(ctx, db.Pool, "c", h, empty)
			r = consumer.Result{Outcome: out, Err: err}
		}
		if r.Outcome != consumer.Conflict {
			t.Errorf("set-wise %v: %v (%v), want conflict", setwise, r.Outcome, r.Err)
		}
	}
}
