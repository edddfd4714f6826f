package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

// A chain of events that each need the one before: step 2 needs step 1,
// step 3 needs step 2. Sent fully reversed, step 3 and step 2 postpone
// until step 1 arrives; then each applies right after the one it needs.

var chainSchema = schema.Set{Name: "chaintest", FS: fstest.MapFS{"0001_init.sql": {Data: []byte(`
CREATE SCHEMA chaintest;
CREATE TABLE chaintest.entity (key text PRIMARY KEY, step int NOT NULL);
CREATE TABLE chaintest.applied (id bigserial PRIMARY KEY, key text NOT NULL, step int NOT NULL);
`)}}}

type chainBody struct {
	Key  string `json:"key"`
	Step int    `json:"step"`
}

// chainHandler applies step 1 by creating the entity and step n by moving
// it from n-1 to n; a step whose predecessor has not applied postpones.
type chainHandler struct{}

func (chainHandler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b chainBody
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return consumer.Permanent(err)
	}
	if b.Step == 1 {
		if _, err := tx.Exec(ctx, `INSERT INTO chaintest.entity VALUES ($1, 1)`, b.Key); err != nil {
			return err
		}
	} else {
		tag, err := tx.Exec(ctx, `UPDATE chaintest.entity SET step = $2 WHERE key = $1 AND step = $2 - 1`, b.Key, b.Step)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return consumer.Postpone(fmt.Errorf("%s step %d needs step %d first", b.Key, b.Step, b.Step-1))
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO chaintest.applied (key, step) VALUES ($1, $2)`, b.Key, b.Step)
	return err
}

var chainTypes = []string{"", "chain.one", "chain.two", "chain.three"}

// runChainMember runs the chain consumer as a member with a NATS
// connection of its own. The backoff is an hour: an event applies within
// the test's minute only when it is retried right after the one it needs.
func runChainMember(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, set func(*engine.Options)) {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	opts := engine.Options{
		Name: "chain", EventTypes: chainTypes[1:], Handler: chainHandler{}, Partitions: stream.DefaultPartitions,
		MaxDeliver: 2, Backoff: []time.Duration{time.Hour}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if set != nil {
		set(&opts)
	}
	c, err := engine.New(db.Pool, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; nc.Close() })
}

func publishStep(t *testing.T, ns *hookbridgetest.JetStream, key string, step int) {
	t.Helper()
	body, _ := json.Marshal(chainBody{Key: key, Step: step})
	ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-%d", key, step), chainTypes[step], key, body)
}

// awaitChains waits until n entities are at step 3, then checks that
// every event applied once, in step order, and none was dead-lettered.
func awaitChains(t *testing.T, db *hookbridgetest.Database, n int) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, fmt.Sprintf("%d entities at step 3", n), func() bool {
		return db.Count(t, `SELECT count(*) FROM chaintest.entity WHERE step = 3`) == n ||
			db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) > 0
	})
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); got != 0 {
		t.Fatalf("%d dead letters, want none", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM chaintest.entity WHERE step = 3`); got != n {
		t.Fatalf("%d entities at step 3, want %d", got, n)
	}
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.inbox`); got != 3*n {
		t.Fatalf("%d inbox rows, want %d: each event applied once", got, 3*n)
	}
	if got := db.Count(t, `SELECT count(*) FROM chaintest.applied a JOIN chaintest.applied b
		ON a.key = b.key AND a.id < b.id AND a.step > b.step`); got != 0 {
		t.Fatalf("%d pairs of steps applied out of step order", got)
	}
	hookbridgetest.Eventually(t, time.Minute, "no postponement left", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures`) == 0
	})
}

// Fully reversed chains on two members: the postponed step 3 never holds
// step 2 of its key, and each applies right after the step it needs.
func TestPostponedChainSentReversedApplies(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, chainSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	runChainMember(t, db, ns, nil)
	runChainMember(t, db, ns, nil)
	awaitMembersSplit(t, ns, "chain", 2)
	const n = 24
	for step := 3; step >= 1; step-- {
		for i := range n {
			publishStep(t, ns, fmt.Sprintf("k%d", i), step)
		}
	}
	awaitChains(t, db, n)
}

// The same with the steps of each key sent back to back (they arrive in
// one batch) and with one event per batch: whatever the batches, the
// chain applies.
func TestPostponedChainInOneBatchApplies(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, engine.DefaultBatchSize} {
		t.Run(fmt.Sprintf("batch=%d", size), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, chainSchema)
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			const n = 16
			for i := range n {
				for step := 3; step >= 1; step-- {
					publishStep(t, ns, fmt.Sprintf("k%d", i), step)
				}
			}
			set := func(o *engine.Options) { o.BatchSize = size }
			runChainMember(t, db, ns, set)
			runChainMember(t, db, ns, set)
			awaitChains(t, db, n)
		})
	}
}

// failAfterPostponeHandler is chainHandler, but step 2 fails (a plain,
// counted failure) while failing is set, once its step 1 is there, and
// step 3 needs nothing.
type failAfterPostponeHandler struct{ failing *atomic.Bool }

func (h failAfterPostponeHandler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b chainBody
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return consumer.Permanent(err)
	}
	switch b.Step {
	case 1:
		if _, err := tx.Exec(ctx, `INSERT INTO chaintest.entity VALUES ($1, 1)`, b.Key); err != nil {
			return err
		}
	case 2:
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM chaintest.entity WHERE key = $1)`, b.Key).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return consumer.Postpone(fmt.Errorf("%s step 2 needs step 1", b.Key))
		}
		if h.failing.Load() {
			return errors.New("step 2 fails for a while")
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO chaintest.applied (key, step) VALUES ($1, $2)`, b.Key, b.Step)
	return err
}

// An event that was postponed and then fails holds its key as any failed
// event does: a later event that arrives meanwhile does not apply before
// it.
func TestPostponedEventThatThenFailsHoldsItsKey(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, chainSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	failing := new(atomic.Bool)
	failing.Store(true)
	runChainMember(t, db, ns, func(o *engine.Options) {
		o.Handler, o.MaxDeliver, o.Backoff = failAfterPostponeHandler{failing}, 1000, []time.Duration{50 * time.Millisecond}
	})
	publishStep(t, ns, "k", 2)
	hookbridgetest.Eventually(t, time.Minute, "step 2 postponed", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'k-2' AND postponed_since IS NOT NULL`) == 1
	})
	publishStep(t, ns, "k", 1)
	hookbridgetest.Eventually(t, time.Minute, "step 2 failing after step 1 applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'k-2' AND failures >= 1`) == 1
	})
	publishStep(t, ns, "k", 3)
	// Retried several times with step 3 queued behind it (or applied
	// past it, which the check below reports).
	hookbridgetest.Eventually(t, time.Minute, "step 2 retried with step 3 there", func() bool {
		return db.Count(t, `SELECT count(*) FROM chaintest.applied WHERE step = 3`) > 0 ||
			db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'k-2' AND failures >= 5`) == 1
	})
	failing.Store(false)
	hookbridgetest.Eventually(t, time.Minute, "all three steps applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM chaintest.applied`) == 3
	})
	if got := db.Count(t, `SELECT count(*) FROM chaintest.applied a JOIN chaintest.applied b
		ON a.key = b.key AND a.id < b.id AND a.step > b.step`); got != 0 {
		t.Fatalf("%d pairs of steps applied out of step order", got)
	}
}
