package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

// The ordering tests apply versions of entities: every event says "key k
// is now at version v", and the handler logs, for every apply, the
// version the transaction saw before it. Applied in order, every log row
// has prev = v-1 (or the version of the last applied event, after a dead
// letter), and every key ends on its last version.

var orderSchema = schema.Set{Name: "ordertest", FS: fstest.MapFS{"0001_init.sql": {Data: []byte(`
CREATE SCHEMA ordertest;
CREATE TABLE ordertest.state (key text PRIMARY KEY, v int NOT NULL);
CREATE TABLE ordertest.log (id bigserial PRIMARY KEY, key text NOT NULL, v int NOT NULL, prev int NOT NULL, member text NOT NULL);
`)}}}

// versionBody is an event of the ordering tests. Fail asks the handler to
// fail: "once" (a retryable error on the first attempt), "panic" (a
// panic on the first attempt) or "dead" (a permanent error).
type versionBody struct {
	Key  string `json:"key"`
	V    int    `json:"v"`
	Fail string `json:"fail,omitempty"`
}

// versionHandler applies versionBody events for one member.
type versionHandler struct {
	member   string
	attempts *sync.Map // event id -> *atomic.Int32, shared by the members
	// dead makes every apply fail as if the database were gone, so a
	// killed member applies nothing of what it still holds.
	dead *atomic.Bool
}

func (h versionHandler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b versionBody
	if h.dead.Load() {
		return &pgconn.PgError{Code: "40001", Message: "member is dead"} // transient: never counted
	}
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return consumer.Permanent(err)
	}
	n, _ := h.attempts.LoadOrStore(ev.ID, new(atomic.Int32))
	first := n.(*atomic.Int32).Add(1) == 1
	switch {
	case b.Fail == "once" && first:
		return errors.New("not yet")
	case b.Fail == "panic" && first:
		panic("handler panics once")
	case b.Fail == "dead":
		return consumer.Permanent(errors.New("never"))
	}
	if ev.OrderingKey != b.Key {
		return consumer.Permanent(fmt.Errorf("ordering key %q, want %q", ev.OrderingKey, b.Key))
	}
	_, err := tx.Exec(ctx, `
		WITH prev AS (SELECT coalesce((SELECT v FROM ordertest.state WHERE key = $1), 0) AS v),
		     logged AS (INSERT INTO ordertest.log (key, v, prev, member) SELECT $1, $2, v, $3 FROM prev)
		INSERT INTO ordertest.state (key, v) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET v = EXCLUDED.v`, b.Key, b.V, h.member)
	return err
}

// member is one instance of a keyed consumer with a NATS connection of
// its own.
type member struct {
	name   string
	dead   *atomic.Bool
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

// startMember runs the keyed consumer "versions" as a new member.
func startMember(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, name string, attempts *sync.Map, batch int) *member {
	t.Helper()
	return startMemberWith(t, db, ns, name, attempts, batch, func(*engine.Options) {})
}

// startMemberWith is startMember with options changed by set.
func startMemberWith(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, name string, attempts *sync.Map, batch int, set func(*engine.Options)) *member {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dead := new(atomic.Bool)
	opts := engine.Options{
		Name: "versions", EventTypes: []string{"version.set"}, Handler: versionHandler{member: name, attempts: attempts, dead: dead},
		Partitions: stream.DefaultPartitions, BatchSize: batch, AckWait: 3 * time.Second, MaxDeliver: 3,
		Backoff: []time.Duration{50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	set(&opts)
	c, err := engine.New(db.Pool, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, dead: dead, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	t.Cleanup(m.stop)
	return m
}

// stop ends the member gracefully (idempotent).
func (m *member) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.cancel = nil
	m.nc.Close()
}

// kill cuts the member off NATS without a word and makes it apply
// nothing more, as a crash would: its pins lapse, its unacked messages
// come back after ack_wait, its member key expires.
func (m *member) kill() {
	m.dead.Store(true)
	m.nc.Close()
}

// checkOrder fails the test unless every key's applies are in order and
// every key ends on want[key]; dead lists the versions dead-lettered.
func checkOrder(t *testing.T, db *hookbridgetest.Database, want map[string]int, dead map[string]map[int]bool) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT key, v, prev FROM ordertest.log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	applies, outOfOrder := 0, 0
	for rows.Next() {
		var key string
		var v, prev int
		if err := rows.Scan(&key, &v, &prev); err != nil {
			t.Fatal(err)
		}
		applies++
		// The version before must be the last one applied, and no version
		// between them may be missing unless it was dead-lettered.
		ok := prev == last[key] && v > prev
		for skipped := prev + 1; ok && skipped < v; skipped++ {
			ok = dead[key][skipped]
		}
		if !ok {
			outOfOrder++
			if outOfOrder <= 5 {
				t.Errorf("key %s: v%d applied after v%d (last applied v%d)", key, v, prev, last[key])
			}
		}
		last[key] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	stale := 0
	for key, v := range want {
		if got := db.Count(t, `SELECT coalesce((SELECT v FROM ordertest.state WHERE key = $1), 0)`, key); got != v {
			stale++
			if stale <= 5 {
				t.Errorf("key %s ends on v%d, want v%d", key, got, v)
			}
		}
	}
	if outOfOrder > 0 || stale > 0 {
		t.Fatalf("%d of %d applies out of order, %d of %d keys stale", outOfOrder, applies, stale, len(want))
	}
}

// Two members, keys published in order; every key's versions apply in
// order, none twice, and each key ends on its last version. Without
// partitions (the unkeyed durable, two members competing) the same run
// applies out of order: the test can fail.
func TestKeyedConsumersApplyEachKeyInOrder(t *testing.T) {
	t.Parallel()
	const keys, versions = 60, 8
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	attempts := &sync.Map{}
	startMember(t, db, ns, "a", attempts, 16)
	startMember(t, db, ns, "b", attempts, 16)
	awaitMembersSplit(t, ns, "versions", 2) // else a may apply everything before b is in
	want := map[string]int{}
	for v := 1; v <= versions; v++ {
		for k := range keys {
			key := fmt.Sprintf("acct-%03d", k)
			body, _ := json.Marshal(versionBody{Key: key, V: v})
			ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-v%d", key, v), "version.set", key, body)
			want[key] = v
		}
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "every version applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == keys*versions
	})
	checkOrder(t, db, want, nil)
	if n := db.Count(t, `SELECT count(*) FROM ordertest.log`); n != keys*versions {
		t.Fatalf("%d applies, want %d (none twice)", n, keys*versions)
	}
	if n := db.Count(t, `SELECT count(DISTINCT member) FROM ordertest.log`); n != 2 {
		t.Fatalf("applies came from %d members, want 2: the partitions were not shared", n)
	}
}

// Retryable failures, a panic and a dead letter in random places, members
// leaving, dying (holding unacked messages) and joining mid-run, with random batch sizes: every key still
// applies in stream order (a dead-lettered version is skipped, recorded,
// and the key goes on), nothing is applied twice or lost, and every key
// ends on its latest version.
func TestKeyedOrderSurvivesFailuresAndMembership(t *testing.T) {
	t.Parallel()
	const keys, versions = 40, 12
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	attempts := &sync.Map{}
	rnd := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	batch := func() int { return []int{1, 4, 32, 256}[rnd.IntN(4)] }
	a := startMember(t, db, ns, "a", attempts, batch())
	b := startMember(t, db, ns, "b", attempts, batch())
	want := map[string]int{}
	dead := map[string]map[int]bool{}
	total, deadCount := 0, 0
	for v := 1; v <= versions; v++ {
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			body := versionBody{Key: key, V: v}
			switch r := rnd.IntN(100); {
			case r < 8:
				body.Fail = "once"
			case r < 9:
				body.Fail = "panic"
			case r < 10 && v < versions:
				body.Fail = "dead"
				if dead[key] == nil {
					dead[key] = map[int]bool{}
				}
				dead[key][v] = true
				deadCount++
			}
			raw, _ := json.Marshal(body)
			ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-v%d", key, v), "version.set", key, raw)
			if body.Fail != "dead" {
				want[key] = v
			}
			total++
		}
		switch v {
		case 3:
			a.stop() // leaves: its partitions move to b
		case 5:
			startMember(t, db, ns, "c", attempts, batch()) // joins: takes a share
		case 8:
			b.kill()
		case 10:
			startMember(t, db, ns, "d", attempts, batch())
		}
	}
	hookbridgetest.Eventually(t, 3*time.Minute, "every version applied or dead-lettered", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`)+db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) == total
	})
	checkOrder(t, db, want, dead)
	if n := db.Count(t, `SELECT count(*) FROM ordertest.log`); n != total-deadCount {
		t.Fatalf("%d applies, want %d", n, total-deadCount)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE ordering_key IS NOT NULL`); n != deadCount {
		t.Fatalf("%d dead letters with their key, want %d", n, deadCount)
	}
	// Every dead version but a key's last one was followed by a later
	// version of its key: each records that it was passed.
	hookbridgetest.Eventually(t, time.Minute, "dead letters marked as passed", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE passed_at IS NULL`) == 0
	})
}

// A source that gains an ordering key: its events already in HOOKS are on
// unkeyed subjects and are applied by the consumer's own durable, the new
// ones by the partitions, which wait until the older ones are applied.
// Every key's versions apply in order across the change.
func TestKeyedOrderAcrossTheUpgrade(t *testing.T) {
	t.Parallel()
	const keys = 30
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	want := map[string]int{}
	publish := func(v int, keyed bool) {
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			body, _ := json.Marshal(versionBody{Key: key, V: v})
			id := fmt.Sprintf("%s-v%d", key, v)
			if keyed {
				ns.PublishKeyedHook(t, "demo", id, "version.set", key, body)
			} else {
				ns.PublishHook(t, "demo", id, "version.set", body)
			}
			want[key] = v
		}
	}
	for v := 1; v <= 20; v++ {
		publish(v, false) // before the upgrade: a backlog on unkeyed subjects
	}
	c, err := engine.New(db.Pool, ns.JS, engine.Options{
		Name: "versions", EventTypes: []string{"version.set"}, Handler: keylessVersions{versionHandler{member: "a", attempts: &sync.Map{}, dead: new(atomic.Bool)}},
		Partitions: stream.DefaultPartitions, Concurrency: 1, BatchSize: 8, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for v := 21; v <= 25; v++ {
		publish(v, true)
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "every version applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == keys*25
	})
	checkOrder(t, db, want, nil)
}

// keylessVersions applies versions whether or not they came with a key
// (the events published before the upgrade have none).
type keylessVersions struct{ versionHandler }

func (h keylessVersions) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b versionBody
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return consumer.Permanent(err)
	}
	ev.OrderingKey = b.Key
	return h.versionHandler.Handle(ctx, tx, ev)
}

// A member dies holding an unapplied event of one key: only that key
// waits for it (it comes back after ack_wait, two minutes here). The
// other keys of its partitions go on as soon as a survivor takes the
// partitions over, and the held key's later event does not apply before
// it.
func TestDeadMembersOtherKeysGoOn(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	const held = "held"
	p := stream.Partition(stream.OrderingKeyHeader(held), stream.DefaultPartitions)
	var others []string // keys of the same partition
	for i := 0; len(others) < 5; i++ {
		if k := fmt.Sprintf("other-%d", i); stream.Partition(stream.OrderingKeyHeader(k), stream.DefaultPartitions) == p {
			others = append(others, k)
		}
	}
	hang := make(chan struct{})
	release := sync.OnceFunc(func() { close(hang) })
	hanging := make(chan struct{}, 1)
	run := func(name string, h consumer.Handler) (*nats.Conn, *atomic.Bool) {
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		pool, err := pgxpool.New(context.Background(), db.URL)
		if err != nil {
			t.Fatal(err)
		}
		dead := new(atomic.Bool)
		if vh, ok := h.(versionHandler); ok {
			vh.dead = dead
			h = vh
		}
		c, err := engine.New(pool, js, engine.Options{Name: "versions", EventTypes: []string{"version.set"}, Handler: h,
			Partitions: stream.DefaultPartitions, AckWait: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = c.Run(ctx); close(done) }()
		// a's hanging batch ends first, or its Run and pool never do.
		t.Cleanup(func() { release(); cancel(); <-done; pool.Close(); nc.Close() })
		return nc, dead
	}
	publish := func(key string, v int) {
		body, _ := json.Marshal(versionBody{Key: key, V: v})
		ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-v%d", key, v), "version.set", key, body)
	}
	attempts := &sync.Map{}
	a, aDead := run("a", consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if ev.OrderingKey == held {
			select {
			case hanging <- struct{}{}:
			default:
			}
			<-hang
			return errors.New("member a is gone")
		}
		return versionHandler{member: "a", attempts: attempts, dead: new(atomic.Bool)}.Handle(ctx, tx, ev)
	}))
	_ = aDead
	publish(held, 1)
	<-hanging // a holds held-v1, in a batch that never ends
	for _, k := range others {
		publish(k, 1) // other batches: other workers
	}
	hookbridgetest.Eventually(t, time.Minute, "the other keys' first versions applied by a", func() bool {
		return db.Count(t, `SELECT count(*) FROM ordertest.log`) == len(others)
	})
	a.Close() // a dies holding held-v1
	run("b", versionHandler{member: "b", attempts: attempts})
	publish(held, 2)
	for _, k := range others {
		publish(k, 2)
	}
	hookbridgetest.Eventually(t, time.Minute, "the other keys' second versions applied by b, long before ack_wait", func() bool {
		return db.Count(t, `SELECT count(*) FROM ordertest.log WHERE member = 'b'`) == len(others)
	})
	if n := db.Count(t, `SELECT count(*) FROM ordertest.log WHERE key = $1`, held); n != 0 {
		t.Fatalf("the held key applied %d times before its first version came back", n)
	}
}

// awaitMembersSplit waits until n members of consumer announce disjoint
// shares covering every partition: the members have split the partitions.
func awaitMembersSplit(t *testing.T, ns *hookbridgetest.JetStream, name string, n int) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, "the partitions split between the members", func() bool {
		ms, err := engine.Members(context.Background(), ns.JS, name)
		if err != nil || len(ms) != n {
			return false
		}
		served := 0
		for _, m := range ms {
			if len(m.Partitions) == 0 {
				return false
			}
			served += len(m.Partitions)
		}
		return served == stream.DefaultPartitions
	})
}
