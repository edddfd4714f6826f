package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A replay of a keyed consumer keeps the live path's promise: a key's
// events never apply past an earlier one that failed or is not applied.

// replayKeyed replays consumer srckey's events and returns each item's
// outcome by event id.
func replayKeyed(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, set func(*engine.ReplayOptions)) (engine.ReplaySummary, map[string]engine.ReplayItem) {
	t.Helper()
	var mu sync.Mutex
	items := map[string]engine.ReplayItem{}
	o := engine.ReplayOptions{Consumer: "srckey", Handler: sourceKeyHandler{}, EventTypes: []string{"version.set"},
		Report: func(it engine.ReplayItem) { mu.Lock(); items[it.EventID] = it; mu.Unlock() }}
	set(&o)
	sum, err := engine.Replay(context.Background(), db.Pool, ns.JS, o)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	return sum, items
}

// appliedOrder is the versions of key applied, in the order they were.
func appliedOrder(t *testing.T, db *hookbridgetest.Database, key string) []int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT v FROM srckeytest.applied WHERE key = $1 ORDER BY id`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// The live consumer holds A's v1, failing while a block row exists, with
// v2 and v3 behind it; a range replay runs meanwhile. It must hold v2 and
// v3 (v1 fails there too), and once the block is lifted the applies come
// as 1, 2, 3. B, another key, is replayed normally.
func TestRangeReplayHoldsAKeyBehindAFailingEvent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	exec(t, db, `INSERT INTO srckeytest.block VALUES ('demo', 'A')`)
	runFor(t, db, ns, func(o *engine.Options) { o.Partitions, o.MaxDeliver = stream.DefaultPartitions, 1000 })
	for v := 1; v <= 3; v++ {
		publishVersion(t, ns, "demo", fmt.Sprintf("A-%d", v), "A", v, "")
	}
	publishVersion(t, ns, "demo", "B-1", "B", 1, "")
	hookbridgetest.Eventually(t, time.Minute, "the live consumer applied B and retries A's v1", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = 'B'`) == 1 &&
			db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'A-1'`) == 1
	})
	sum, items := replayKeyed(t, db, ns, func(o *engine.ReplayOptions) { o.Since = time.Now().Add(-time.Hour) })
	if items["A-1"].Outcome != consumer.Failed || items["A-2"].Outcome != consumer.ReplayHeld || items["A-3"].Outcome != consumer.ReplayHeld {
		t.Fatalf("replay outcomes A-1 %s, A-2 %s, A-3 %s; want failed, held, held", items["A-1"].Outcome, items["A-2"].Outcome, items["A-3"].Outcome)
	}
	if sum.Held != 2 || items["B-1"].Outcome != consumer.Duplicate {
		t.Fatalf("summary %+v, B-1 %s; want 2 held and B a duplicate", sum, items["B-1"].Outcome)
	}
	if got := appliedOrder(t, db, "A"); len(got) != 0 {
		t.Fatalf("A applied %v while its v1 fails", got)
	}
	exec(t, db, `DELETE FROM srckeytest.block`)
	hookbridgetest.Eventually(t, time.Minute, "A's versions applied by the live consumer", func() bool {
		return len(appliedOrder(t, db, "A")) == 3
	})
	if got := appliedOrder(t, db, "A"); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("A applied as %v, want [1 2 3]", got)
	}
}

// The dry run of that replay says what the real run would hold: A's v1
// is new to the inbox, but the live consumer is failing it, so A's v2 and
// v3 would be held behind it. It applies nothing.
func TestDryRunHoldsAKeyBehindAnEventFailingLive(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	exec(t, db, `INSERT INTO srckeytest.block VALUES ('demo', 'A')`)
	runFor(t, db, ns, func(o *engine.Options) { o.Partitions, o.MaxDeliver = stream.DefaultPartitions, 1000 })
	for v := 1; v <= 3; v++ {
		publishVersion(t, ns, "demo", fmt.Sprintf("A-%d", v), "A", v, "")
	}
	publishVersion(t, ns, "demo", "B-1", "B", 1, "")
	hookbridgetest.Eventually(t, time.Minute, "the live consumer applied B and retries A's v1", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = 'B'`) == 1 &&
			db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'A-1'`) == 1
	})
	sum, items := replayKeyed(t, db, ns, func(o *engine.ReplayOptions) { o.Since, o.DryRun = time.Now().Add(-time.Hour), true })
	a1 := items["A-1"]
	if a1.Outcome != consumer.ReplayNew || !strings.Contains(a1.Error, "the live consumer is failing it") || !strings.Contains(a1.Error, "blocked") {
		t.Fatalf("A-1 %s (%q); want new, noting the live consumer's failure and its error", a1.Outcome, a1.Error)
	}
	for _, id := range []string{"A-2", "A-3"} {
		if it := items[id]; it.Outcome != consumer.ReplayHeld || !strings.Contains(it.Error, "demo/A-1") {
			t.Fatalf("%s %s (%q); want held behind demo/A-1", id, it.Outcome, it.Error)
		}
	}
	if sum.Held != 2 || sum.New != 1 || items["B-1"].Outcome != consumer.Duplicate {
		t.Fatalf("summary %+v, B-1 %s; want 2 held, 1 new and B a duplicate", sum, items["B-1"].Outcome)
	}
	if got := appliedOrder(t, db, "A"); len(got) != 0 {
		t.Fatalf("A applied %v by a dry run", got)
	}
}

// With no consumer running, a replay that starts after A's v1 (not
// applied) holds A's later events, and its dry run says so.
func TestReplayHoldsAKeyBehindAnEventBeforeItsRange(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	publishVersion(t, ns, "demo", "A-1", "A", 1, "")
	from := ns.PublishKeyedHook(t, "demo", "A-2", "version.set", "A", []byte(`{"key":"A","v":2}`))
	publishVersion(t, ns, "demo", "B-1", "B", 1, "")
	for _, dry := range []bool{true, false} {
		_, items := replayKeyed(t, db, ns, func(o *engine.ReplayOptions) { o.FromSeq, o.DryRun = from, dry })
		if items["A-2"].Outcome != consumer.ReplayHeld || items["B-1"].Outcome == consumer.ReplayHeld {
			t.Fatalf("dry run %v: A-2 %s (%s), B-1 %s; want A-2 held behind A-1, B-1 not", dry, items["A-2"].Outcome, items["A-2"].Error, items["B-1"].Outcome)
		}
	}
	if got := appliedOrder(t, db, "A"); len(got) != 0 {
		t.Fatalf("A applied %v before its v1", got)
	}
	if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = 'B'`); n != 1 {
		t.Fatalf("B applied %d times, want 1", n)
	}
}

// A later event marks the dead letter it passes in its own transaction,
// so no snapshot sees the later event applied and the dead letter
// unmarked; and a dead letter so marked is held by a replay of the dead
// letters unless it is asked to apply it out of order.
func TestPassedMarkCommitsWithTheLaterEvent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	runFor(t, db, ns, func(o *engine.Options) { o.Partitions = stream.DefaultPartitions })
	publishVersion(t, ns, "demo", "A-1", "A", 1, "dead")
	hookbridgetest.Eventually(t, time.Minute, "A's v1 dead-lettered", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) == 1
	})
	publishVersion(t, ns, "demo", "A-2", "A", 2, "")
	hookbridgetest.Eventually(t, time.Minute, "A's v2 applied", func() bool {
		// One snapshot: the inbox row and the mark commit together.
		seen := db.Count(t, `SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM hookbridge.inbox WHERE event_id = 'A-2') THEN 0
			WHEN EXISTS (SELECT 1 FROM hookbridge.dead_letters WHERE passed_by_event = 'A-2') THEN 1 ELSE 2 END`)
		if seen == 2 {
			t.Fatal("A's v2 applied while its dead letter was not marked passed")
		}
		return seen == 1
	})
	_, items := replayKeyed(t, db, ns, func(o *engine.ReplayOptions) { o.DeadLetters = true })
	if it := items["A-1"]; it.Outcome != consumer.ReplayHeld {
		t.Fatalf("replay of the passed dead letter: %s (%s), want held", it.Outcome, it.Error)
	}
	if got := appliedOrder(t, db, "A"); !slices.Equal(got, []int{2}) {
		t.Fatalf("A applied as %v, want [2]", got)
	}
}
