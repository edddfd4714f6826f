package engine_test

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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// flakyVersions fails the events whose body says fail="until" with a
// plain (countable) error until fixed is set, as a handler whose event
// needs a row that is not there yet fails; every member runs the same code.
type flakyVersions struct {
	member   string
	fixed    *atomic.Bool
	attempts *sync.Map
}

func (h flakyVersions) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b versionBody
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return consumer.Permanent(err)
	}
	n, _ := h.attempts.LoadOrStore(ev.ID, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
	if b.Fail == "until" && !h.fixed.Load() {
		return errors.New("not yet")
	}
	_, err := tx.Exec(ctx, `
		WITH prev AS (SELECT coalesce((SELECT v FROM ordertest.state WHERE key = $1), 0) AS v),
		     logged AS (INSERT INTO ordertest.log (key, v, prev, member) SELECT $1, $2, v, $3 FROM prev)
		INSERT INTO ordertest.state (key, v) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET v = EXCLUDED.v`, b.Key, b.V, h.member)
	return err
}

func startFlaky(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, name string, fixed *atomic.Bool, attempts *sync.Map) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	c, err := engine.New(db.Pool, js, engine.Options{
		Name: "versions", EventTypes: []string{"version.set"}, Handler: flakyVersions{member: name, fixed: fixed, attempts: attempts},
		Partitions: stream.DefaultPartitions, BatchSize: 1, AckWait: 2 * time.Second, MaxDeliver: 3,
		Backoff: []time.Duration{time.Second}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; nc.Close() })
	return nc
}

// A member cut off from NATS that still reaches Postgres keeps retrying
// the failed head of its key in place, dead-letters it at max_deliver and
// applies the next event of the key. Its term and ack never reach NATS,
// so the member that takes the partition over gets both events again.
// fixedLater: the condition the event waited for is met by then.
func runZombieDeadLetter(t *testing.T, fixedLater bool) {
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	fixed, attempts := new(atomic.Bool), &sync.Map{}
	b := startFlaky(t, db, ns, "b", fixed, attempts)
	v1, _ := json.Marshal(versionBody{Key: "k", V: 1, Fail: "until"})
	v2, _ := json.Marshal(versionBody{Key: "k", V: 2})
	ns.PublishKeyedHook(t, "demo", "k-v1", "version.set", "k", v1)
	ns.PublishKeyedHook(t, "demo", "k-v2", "version.set", "k", v2)
	hookbridgetest.Eventually(t, time.Minute, "b failed v1 once", func() bool {
		n, ok := attempts.Load("k-v1")
		return ok && n.(*atomic.Int32).Load() >= 1
	})
	b.Close() // cut off from NATS; its database pool still works
	hookbridgetest.Eventually(t, time.Minute, "b dead-lettered v1 and applied v2", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) == 1 &&
			db.Count(t, `SELECT count(*) FROM ordertest.log WHERE v = 2`) == 1
	})
	t.Logf("b (cut off from NATS) dead-lettered v1 and applied v2")
	if fixedLater {
		fixed.Store(true)
	}
	startFlaky(t, db, ns, "a", fixed, attempts)
	v3, _ := json.Marshal(versionBody{Key: "k", V: 3})
	ns.PublishKeyedHook(t, "demo", "k-v3", "version.set", "k", v3)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && db.Count(t, `SELECT count(*) FROM ordertest.log WHERE v = 3`) == 0 {
		time.Sleep(500 * time.Millisecond)
	}
	rows, _ := db.Pool.Query(context.Background(), `SELECT v, prev, member FROM ordertest.log ORDER BY id`)
	var trail string
	for rows.Next() {
		var v, prev int
		var m string
		_ = rows.Scan(&v, &prev, &m)
		trail += fmt.Sprintf(" v%d(prev v%d, by %s)", v, prev, m)
	}
	n, _ := attempts.Load("k-v1")
	t.Logf("applies in order of commit:%s; v1 attempts %d; inbox v1 rows %d; unresolved dead letters %d", trail, n.(*atomic.Int32).Load(),
		db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'k-v1'`),
		db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL`))
	checkOrder(t, db, map[string]int{"k": 3}, map[string]map[int]bool{"k": {1: true}})
}

func TestKeyedZombieDeadLetterThenApplied(t *testing.T) {
	t.Parallel()
	runZombieDeadLetter(t, true)
}

func TestKeyedZombieDeadLetterDoesNotStallKey(t *testing.T) {
	t.Parallel()
	runZombieDeadLetter(t, false)
}
