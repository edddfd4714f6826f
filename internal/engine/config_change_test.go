package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// No configuration change strands what was answered 2xx: each test stores
// events while the consumer is stopped, changes its configuration, and
// counts what the consumer applies after.

// runFor runs consumer srckey with opts until the test ends or stop is
// called.
func runFor(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, set func(*engine.Options)) (stop func()) {
	t.Helper()
	opts := engine.Options{Name: "srckey", EventTypes: []string{"version.set"}, Handler: sourceKeyHandler{},
		MaxDeliver: -1, Backoff: []time.Duration{50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	set(&opts)
	c, err := engine.New(db.Pool, ns.JS, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func publishTyped(t *testing.T, ns *hookbridgetest.JetStream, keyed bool, source, id, typ, key string) {
	t.Helper()
	body, _ := json.Marshal(versionBody{Key: key, V: 1})
	if keyed {
		ns.PublishKeyedHook(t, source, id, typ, key, body)
	} else {
		ns.PublishHook(t, source, id, typ, body)
	}
}

// A source's key is turned off while keyed events wait: the consumer,
// now without a keyed source, drains its partition durables.
func TestKeyTurnedOffDrainsThePartitions(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	keyed := func(o *engine.Options) { o.Partitions = stream.DefaultPartitions }
	stop := runFor(t, db, ns, keyed)
	awaitDurables(t, ns, durablesOf(true)) // it ran, so they exist
	stop()
	const n = 50
	for i := range n {
		publishTyped(t, ns, true, "demo", fmt.Sprintf("e%d", i), "version.set", fmt.Sprintf("k%d", i%7))
	}
	runFor(t, db, ns, func(o *engine.Options) {}) // ordering_key: none
	hookbridgetest.Eventually(t, time.Minute, "every keyed event applied after the key was turned off", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == n
	})
}

// The key is turned off before the consumer ever ran keyed: an ingress
// alone accepted the keyed events, so no partition durable exists. The
// consumer, started with ordering_key: none, still applies every one.
func TestKeyTurnedOffBeforeTheConsumerEverRanKeyed(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	const n = 50
	for i := range n {
		publishTyped(t, ns, true, "demo", fmt.Sprintf("e%d", i), "version.set", fmt.Sprintf("k%d", i%7))
	}
	runFor(t, db, ns, func(o *engine.Options) {}) // ordering_key: none
	hookbridgetest.Eventually(t, time.Minute, "every keyed event applied, though no partition durable existed", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == n
	})
}

// During a rolling configuration change an instance that still keys the
// source stores keyed events after a consumer without the key started:
// that consumer still applies them, without a restart.
func TestKeyedEventsStoredAfterAKeylessConsumerStartedAreApplied(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	runFor(t, db, ns, func(o *engine.Options) { engine.SetKeyedRecheck(o, 100*time.Millisecond) }) // ordering_key: none
	publishTyped(t, ns, false, "demo", "u0", "version.set", "k0")
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.inbox`)
	const n = 10
	for i := range n {
		publishTyped(t, ns, true, "demo", fmt.Sprintf("e%d", i), "version.set", fmt.Sprintf("k%d", i%3))
	}
	publishTyped(t, ns, false, "demo", "u1", "version.set", "k9")
	hookbridgetest.Eventually(t, time.Minute, "the keyed events stored after the start applied too", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == n+2
	})
}

// A source's key is turned on while the consumer is stopped: it ran
// unkeyed, then events arrive, first unkeyed (from before the change),
// then keyed. Started keyed, it applies every one, each key's in order:
// the older unkeyed events before the keyed ones, even while one of them
// fails for a while.
func TestKeyTurnedOnWhileTheConsumerWasStopped(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	const keys, versions = 5, 6
	publish := func(keyed bool, v int) {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			body, _ := json.Marshal(versionBody{Key: key, V: v})
			id := fmt.Sprintf("%s-v%d", key, v)
			if keyed {
				ns.PublishKeyedHook(t, "demo", id, "version.set", key, body)
			} else {
				ns.PublishHook(t, "demo", id, "version.set", body)
			}
		}
	}
	stop := runFor(t, db, ns, func(o *engine.Options) {}) // no key yet
	publish(false, 1)
	hookbridgetest.Eventually(t, time.Minute, "the unkeyed events applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == keys
	})
	stop()
	publish(false, 2) // accepted before the key was turned on
	for v := 3; v <= versions; v++ {
		publish(true, v)
	}
	// k0's older unkeyed event fails for a while: its keyed ones wait.
	var failing atomic.Bool
	failing.Store(true)
	runFor(t, db, ns, func(o *engine.Options) {
		o.Partitions, o.MaxDeliver = stream.DefaultPartitions, 1000
		o.Handler = consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if ev.ID == "k0-v2" && failing.Load() {
				return errors.New("failing for a while")
			}
			return sourceKeyHandler{}.Handle(ctx, tx, ev)
		})
	})
	// It fails until a keyed event of k0 applies past it (the order
	// broken, which the check below reports) or it has failed 50 times
	// (2.5 s at least: the partitions of a member that does not wait
	// start well within it).
	hookbridgetest.Eventually(t, time.Minute, "k0's unkeyed event failing", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = 'k0' AND v > 2`) > 0 ||
			db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'k0-v2' AND failures >= 50`) == 1
	})
	failing.Store(false)
	hookbridgetest.Eventually(t, time.Minute, "every event applied after the key was turned on", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == keys*versions
	})
	if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied`); n != keys*versions {
		t.Fatalf("%d applies, want %d (each event once)", n, keys*versions)
	}
	if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied a JOIN srckeytest.applied b
		ON a.key = b.key AND a.id < b.id AND a.v > b.v`); n != 0 {
		t.Fatalf("%d pairs of a key's versions applied out of order", n)
	}
}

// A consumer's event types narrow, or a source is taken off it, while
// events of the dropped subjects wait: they are applied, the ones stored
// after the change are not, and the durables end on the new filter.
func TestNarrowedConsumerAppliesWhatWasStoredBefore(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, sourceKeySchema)
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			partitions := 0
			if keyed {
				partitions = stream.DefaultPartitions
			}
			wide := func(o *engine.Options) {
				o.Partitions, o.Sources, o.EventTypes = partitions, []string{"a", "b"}, []string{"t.one", "t.two"}
			}
			stop := runFor(t, db, ns, wide)
			awaitDurables(t, ns, durablesOf(keyed))
			stop()
			const n = 20
			for i := range n {
				key := fmt.Sprintf("k%d", i%5)
				publishTyped(t, ns, keyed, "a", fmt.Sprintf("a1-%d", i), "t.one", key)
				publishTyped(t, ns, keyed, "a", fmt.Sprintf("a2-%d", i), "t.two", key) // type dropped
				publishTyped(t, ns, keyed, "b", fmt.Sprintf("b1-%d", i), "t.one", key) // source dropped
			}
			narrow := func(o *engine.Options) {
				o.Partitions, o.Sources, o.EventTypes = partitions, []string{"a"}, []string{"t.one"}
			}
			runFor(t, db, ns, narrow)
			awaitNarrowing(t, ns, durablesOf(keyed))
			for i := range n {
				key := fmt.Sprintf("k%d", i%5)
				publishTyped(t, ns, keyed, "a", fmt.Sprintf("late-a2-%d", i), "t.two", key)
				publishTyped(t, ns, keyed, "b", fmt.Sprintf("late-b1-%d", i), "t.one", key)
				publishTyped(t, ns, keyed, "a", fmt.Sprintf("late-a1-%d", i), "t.one", key)
			}
			hookbridgetest.Eventually(t, time.Minute, "what was stored before the change applied, and the new events", func() bool {
				return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) >= 4*n
			})
			if got := db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id LIKE 'late-%' AND event_id NOT LIKE 'late-a1-%'`); got != 0 {
				t.Fatalf("%d events of dropped subjects stored after the change were applied", got)
			}
			durables := durablesOf(keyed)
			hookbridgetest.Eventually(t, time.Minute, "the durables narrowed to the new filter", func() bool {
				for _, name := range durables {
					c, err := ns.JS.Consumer(context.Background(), stream.Hooks, name)
					if err != nil {
						return false
					}
					info, err := c.Info(context.Background())
					if err != nil {
						return false
					}
					f := info.Config.FilterSubjects
					if info.Config.FilterSubject != "" {
						f = []string{info.Config.FilterSubject}
					}
					if len(f) != 1 || slices.ContainsFunc(f, func(s string) bool {
						return s != stream.HookFilter("a", "t.one") && s != stream.KeyedHookFilter(partitionOf(name), "a", "t.one")
					}) {
						return false
					}
				}
				return true
			})
		})
	}
}

func partitionOf(durable string) int {
	_, p := stream.ConsumerOfDurable(durable)
	return p
}

// durablesOf are the durables of consumer srckey, keyed or not.
func durablesOf(keyed bool) []string {
	if !keyed {
		return []string{"srckey"}
	}
	var out []string
	for p := range stream.DefaultPartitions {
		out = append(out, stream.PartitionDurable("srckey", p))
	}
	return out
}

func awaitDurables(t *testing.T, ns *hookbridgetest.JetStream, names []string) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, "the consumer's durables created", func() bool {
		for _, name := range names {
			if _, err := ns.JS.Consumer(context.Background(), stream.Hooks, name); err != nil {
				return false
			}
		}
		return true
	})
}

// awaitNarrowing waits until every durable was updated by the narrowed
// configuration: it records a narrowing, or has nothing left on the
// dropped subjects and took the new filter (a partition none of the keys
// hash to).
func awaitNarrowing(t *testing.T, ns *hookbridgetest.JetStream, names []string) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, "the durables updated by the narrowed configuration", func() bool {
		for _, name := range names {
			c, err := ns.JS.Consumer(context.Background(), stream.Hooks, name)
			if err != nil {
				return false
			}
			cfg := c.CachedInfo().Config
			if cfg.Metadata["hookbridge.narrowing.until"] == "" && len(cfg.FilterSubjects) > 1 {
				return false
			}
		}
		return true
	})
}
