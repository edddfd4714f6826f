package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// passedMarkHandler: order.bad fails permanently while bad is set, and
// order.note postpones while waiting is set; the rest as
// postponeRetryHandler.
type passedMarkHandler struct{ bad, waiting *atomic.Bool }

func (h passedMarkHandler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	switch {
	case ev.Type == "order.bad" && h.bad.Load():
		return consumer.Permanent(errors.New("bad for now"))
	case ev.Type == "order.note" && h.waiting.Load():
		return consumer.Postpone(errors.New("waiting for now"))
	}
	return postponeRetryHandler{}.Handle(ctx, tx, ev)
}

// No event applies past a dead letter of its key without marking it
// passed (docs/DESIGN.md, "Order"), also when the transaction that
// passes it holds an earlier event of the key too: a postponed event
// tried again from the key's head, with the later events behind it. The
// dead letter is then requeued without out-of-order, which must hold it,
// and with, which applies it.
func TestRetryFromHeadMarksTheDeadLetterItsLaterEventPasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		types []string // stream order
		// restart: stop the consumer once the dead letter is written and
		// order.note postponed, let order.note apply, and start it again.
		restart bool
		want    []string // commit order before the requeue
		passer  string   // the event that passes the dead letter
	}{
		// paid postpones; created applies; bad is dead-lettered (or held
		// behind the postponed paid, and dead-lettered when it is tried
		// from the head with note behind it).
		{"postponed-then-dead-lettered", []string{"order.paid", "order.created", "order.bad", "order.note"}, false,
			[]string{"order.created", "order.paid", "order.note"}, "o1-3"},
		// Both notes postpone, bad is dead-lettered between them.
		// Started again, the consumer tries the key from its head: the
		// first note (before the dead letter) and the second (after it)
		// apply in one transaction.
		{"restarted-with-both-sides", []string{"order.note", "order.bad", "order.note"}, true,
			[]string{"order.note", "order.note"}, "o1-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, postponeRetrySchema)
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			bad, waiting := new(atomic.Bool), new(atomic.Bool)
			bad.Store(true)
			waiting.Store(tc.restart)
			h := passedMarkHandler{bad: bad, waiting: waiting}
			publishPretry(t, ns, tc.types...)
			stop := runPretry(t, db, ns, h, 3)
			db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.dead_letters`)
			if tc.restart {
				db.AwaitCount(t, 2, `SELECT count(*) FROM hookbridge.delivery_failures WHERE postponed_since IS NOT NULL`)
				stop()
				waiting.Store(false)
				runPretry(t, db, ns, h, 3)
			}
			db.AwaitCount(t, len(tc.want), `SELECT count(*) FROM pretry.applied`)
			if got := pretryApplied(t, db); !slices.Equal(got, tc.want) {
				t.Fatalf("applied %v, want %v", got, tc.want)
			}
			var passedBy *string
			if err := db.Pool.QueryRow(context.Background(),
				`SELECT passed_by_event FROM hookbridge.dead_letters`).Scan(&passedBy); err != nil {
				t.Fatal(err)
			}
			if passedBy == nil || *passedBy != tc.passer {
				t.Fatalf("dead letter passed by %s, want %s: a later event of its key applied past it and left it unmarked",
					ptrText(passedBy), tc.passer)
			}
			// The cause is fixed and the dead letter requeued: held
			// without out-of-order, applied with it.
			bad.Store(false)
			for _, outOfOrder := range []bool{false, true} {
				var outcome consumer.Outcome
				if _, err := engine.Replay(context.Background(), db.Pool, ns.JS, engine.ReplayOptions{
					Consumer: "pretry", Handler: h, EventTypes: postponeRetryTypes, DeadLetters: true, OutOfOrder: outOfOrder,
					Report: func(it engine.ReplayItem) { outcome = it.Outcome },
				}); err != nil {
					t.Fatal(err)
				}
				want := map[bool]consumer.Outcome{false: consumer.ReplayHeld, true: consumer.Processed}[outOfOrder]
				if outcome != want {
					t.Fatalf("requeue with out-of-order %v: %v, want %v", outOfOrder, outcome, want)
				}
				if n := db.Count(t, `SELECT count(*) FROM pretry.applied WHERE typ = 'order.bad'`); n != map[bool]int{false: 0, true: 1}[outOfOrder] {
					t.Fatalf("order.bad applied %d times after the requeue with out-of-order %v", n, outOfOrder)
				}
			}
		})
	}
}

func ptrText(s *string) string {
	if s == nil {
		return "nothing"
	}
	return *s
}

// An event postponed past its postpone_limit becomes a dead letter after
// the later events of its key applied past it. It starts marked passed,
// by the first of them, so a requeue without out-of-order holds it: the
// later event marks the postponement's row in its own transaction (a batch
// of one: it applies alone, the postponed event is tried again in the
// next batch), or, applied in the same batch before the row existed, is
// named when the postponement is recorded; the dead letter takes the mark
// over. The consumer restarts in between with a short postpone_limit:
// nothing held in memory carries the mark.
func TestPostponedDeadLetterStartsPassed(t *testing.T) {
	t.Parallel()
	for _, sameBatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("same-batch=%v", sameBatch), func(t *testing.T) {
			t.Parallel()
			size := 1
			if sameBatch {
				size = engine.DefaultBatchSize
			}
			db := hookbridgetest.Postgres(t, postponeRetrySchema)
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			bad, waiting := new(atomic.Bool), new(atomic.Bool)
			waiting.Store(true)
			h := passedMarkHandler{bad: bad, waiting: waiting}
			// o1-0 order.note postpones while waiting; o1-1
			// order.cancelled needs nothing.
			if sameBatch {
				publishPretry(t, ns, "order.note", "order.cancelled")
			} else {
				publishPretry(t, ns, "order.note")
			}
			stop := runPretry(t, db, ns, h, size)
			db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'o1-0' AND postponed_since IS NOT NULL`)
			if !sameBatch {
				publishPretry(t, ns, "order.note", "order.cancelled") // o1-0 again is a duplicate JetStream drops
			}
			db.AwaitCount(t, 1, `SELECT count(*) FROM pretry.applied WHERE typ = 'order.cancelled'`)
			db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'o1-0' AND passed_by_event = 'o1-1'`)
			stop()
			runPretry(t, db, ns, h, size, func(o *engine.Options) { o.PostponeLimit = time.Millisecond })
			db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.dead_letters WHERE event_id = 'o1-0' AND reason = 'postponed'`)
			var passedBy *string
			if err := db.Pool.QueryRow(context.Background(),
				`SELECT passed_by_event FROM hookbridge.dead_letters WHERE event_id = 'o1-0'`).Scan(&passedBy); err != nil {
				t.Fatal(err)
			}
			if passedBy == nil || *passedBy != "o1-1" {
				t.Fatalf("postponed dead letter passed by %s, want o1-1, which applied past it", ptrText(passedBy))
			}
			waiting.Store(false)
			for _, outOfOrder := range []bool{false, true} {
				var outcome consumer.Outcome
				if _, err := engine.Replay(context.Background(), db.Pool, ns.JS, engine.ReplayOptions{
					Consumer: "pretry", Handler: h, EventTypes: postponeRetryTypes, DeadLetters: true, OutOfOrder: outOfOrder,
					Report: func(it engine.ReplayItem) { outcome = it.Outcome },
				}); err != nil {
					t.Fatal(err)
				}
				want := map[bool]consumer.Outcome{false: consumer.ReplayHeld, true: consumer.Processed}[outOfOrder]
				if outcome != want {
					t.Fatalf("requeue with out-of-order %v: %v, want %v", outOfOrder, outcome, want)
				}
				if n := db.Count(t, `SELECT count(*) FROM pretry.applied WHERE typ = 'order.note'`); n != map[bool]int{false: 0, true: 1}[outOfOrder] {
					t.Fatalf("order.note applied %d times after the requeue with out-of-order %v", n, outOfOrder)
				}
			}
		})
	}
}
