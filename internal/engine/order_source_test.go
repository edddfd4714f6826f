package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

// Order is per (source, ordering key): two sources whose keys share a
// value name two entities.

var sourceKeySchema = schema.Set{Name: "srckeytest", FS: fstest.MapFS{"0001_init.sql": {Data: []byte(`
CREATE SCHEMA srckeytest;
CREATE TABLE srckeytest.applied (id bigserial PRIMARY KEY, source text NOT NULL, key text NOT NULL, v int NOT NULL);
CREATE TABLE srckeytest.block (source text NOT NULL, key text NOT NULL, PRIMARY KEY (source, key));
`)}}}

// sourceKeyHandler logs every apply; an event fails permanently when its
// body says "dead", and with a retryable error while a block row names
// its source and key.
type sourceKeyHandler struct{}

func (sourceKeyHandler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b versionBody
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return consumer.Permanent(err)
	}
	if b.Fail == "dead" {
		return consumer.Permanent(errors.New("never"))
	}
	var blocked bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM srckeytest.block WHERE source = $1 AND key = $2)`,
		ev.Source, b.Key).Scan(&blocked); err != nil {
		return err
	}
	if blocked {
		return errors.New("blocked")
	}
	_, err := tx.Exec(ctx, `INSERT INTO srckeytest.applied (source, key, v) VALUES ($1, $2, $3)`, ev.Source, b.Key, b.V)
	return err
}

func runSourceKeyConsumer(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream) {
	t.Helper()
	c, err := engine.New(db.Pool, ns.JS, engine.Options{
		Name: "srckey", EventTypes: []string{"version.set"}, Handler: sourceKeyHandler{},
		Partitions: stream.DefaultPartitions, MaxDeliver: -1, Backoff: []time.Duration{50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func publishVersion(t *testing.T, ns *hookbridgetest.JetStream, source, id, key string, v int, fail string) {
	t.Helper()
	body, _ := json.Marshal(versionBody{Key: key, V: v, Fail: fail})
	ns.PublishKeyedHook(t, source, id, "version.set", key, body)
}

// A failing event of source a holds only a's key: b's event with the same
// key value applies meanwhile.
func TestOrderIsPerSourceAndKey(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	exec(t, db, `INSERT INTO srckeytest.block VALUES ('a', 'k')`)
	runSourceKeyConsumer(t, db, ns)
	publishVersion(t, ns, "a", "a-k-1", "k", 1, "")
	publishVersion(t, ns, "b", "b-k-1", "k", 1, "")
	hookbridgetest.Eventually(t, time.Minute, "b's event applied while a's same key value fails", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE source = 'b'`) == 1
	})
	if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE source = 'a'`); n != 0 {
		t.Fatalf("a's blocked event applied %d times", n)
	}
	exec(t, db, `DELETE FROM srckeytest.block`)
	hookbridgetest.Eventually(t, time.Minute, "a's event applied once unblocked", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE source = 'a'`) == 1
	})
}

// A dead letter of source a is passed by a's next event of the key, not
// by b's event with the same key value.
func TestDeadLettersArePassedWithinTheirSource(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	runSourceKeyConsumer(t, db, ns)
	publishVersion(t, ns, "a", "a-k-1", "k", 1, "dead")
	hookbridgetest.Eventually(t, time.Minute, "a's event dead-lettered", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) == 1
	})
	publishVersion(t, ns, "b", "b-k-1", "k", 1, "")
	hookbridgetest.Eventually(t, time.Minute, "b's event applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE source = 'b'`) == 1
	})
	publishVersion(t, ns, "a", "a-k-2", "k", 2, "")
	hookbridgetest.Eventually(t, time.Minute, "a's dead letter passed", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE passed_at IS NOT NULL`) == 1
	})
	var by string
	if err := db.Pool.QueryRow(context.Background(), `SELECT passed_by_event FROM hookbridge.dead_letters`).Scan(&by); err != nil {
		t.Fatal(err)
	}
	if by != "a-k-2" {
		t.Fatalf("a's dead letter passed by %q, want a-k-2 (a later event of its own source)", by)
	}
}

func exec(t *testing.T, db *hookbridgetest.Database, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// The partitions wait at start for the keyed sources' own older unkeyed
// messages only: another source's message that fails for ever (here
// before them in the stream, holding the unkeyed durable's floor) does not
// hold them, and neither does a keyed source's older message applied above
// that floor.
func TestPartitionsWaitOnlyForTheKeyedSourcesOlderMessages(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	exec(t, db, `INSERT INTO srckeytest.block VALUES ('gh', 'poison')`)
	body, _ := json.Marshal(versionBody{Key: "poison", V: 1})
	ns.PublishHook(t, "gh", "gh-1", "version.set", body)
	body, _ = json.Marshal(versionBody{Key: "k", V: 1})
	ns.PublishHook(t, "demo", "demo-k-1", "version.set", body) // before demo had a key
	c, err := engine.New(db.Pool, ns.JS, engine.Options{
		Name: "srckey", EventTypes: []string{"version.set"}, Handler: sourceKeyHandler{},
		Partitions: stream.DefaultPartitions, KeyedSources: []string{"demo"}, MaxDeliver: -1,
		Backoff: []time.Duration{50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	publishVersion(t, ns, "demo", "demo-k-2", "k", 2, "")
	hookbridgetest.Eventually(t, time.Minute, "the keyed event applied while gh's event keeps failing", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE source = 'demo'`) == 2
	})
	if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE source = 'demo' AND v = 1 AND id < (SELECT id FROM srckeytest.applied WHERE v = 2)`); n != 1 {
		t.Fatal("demo's older unkeyed event did not apply before its keyed one")
	}
}
