package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// One key fails from the start, so the partition's ack floor stays below
// it while many events of other keys apply behind it: more than a
// takeover reads one by one. Then the member that served the partition
// dies. The survivor's takeover must end within ack_wait and a pin's
// lapse, and the events that keep arriving for the partition's other keys
// must all apply: a gated partition's staged messages may not fill its
// window and stop the pulls that bring the dead member's messages back.
//
// It runs with a scan cap below the range (50: the takeover reads none of
// it and gates the whole partition until the counts agree) and with the
// default cap (20,000: it reads the range, and only the keys of what the
// dead member held wait). The default cap's own overflow would take more
// than 20,000 unacked messages in one partition, minutes of applies on a
// loaded 2-core machine, so the small cap stands in for it here (the
// path is the same; only the cap differs).
func TestTakeoverPastALongUnackedRange(t *testing.T) {
	t.Parallel()
	for _, scanCap := range []int{50, 0} {
		t.Run(fmt.Sprintf("scan-cap=%d", scanCap), func(t *testing.T) {
			t.Parallel()
			takeoverPastALongUnackedRange(t, scanCap)
		})
	}
}

// takeoverPastALongUnackedRange runs the test with scanCap (0: the
// default).
func takeoverPastALongUnackedRange(t *testing.T, scanCap int) {
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	start := func() (*nats.Conn, context.CancelFunc, chan error) {
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		opts := engine.Options{
			Name: "srckey", EventTypes: []string{"version.set"}, Handler: sourceKeyHandler{},
			Partitions: stream.DefaultPartitions, MaxDeliver: -1, Backoff: []time.Duration{200 * time.Millisecond},
			// A small window: a few dozen messages per partition.
			Concurrency: 1, BatchSize: 4, Prefetch: 1,
			// Longer than a pin's lapse (15s), as by default (30s): the survivor
			// is pinned before the dead member's messages come back.
			AckWait: 25 * time.Second,
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		if scanCap > 0 {
			engine.SetMaxForeignScan(&opts, scanCap)
		}
		c, err := engine.New(db.Pool, js, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return nc, cancel, done
	}
	ncA, cancelA, doneA := start()
	awaitMembersSplit(t, ns, "srckey", 1)
	ncB, cancelB, doneB := start()
	t.Cleanup(func() { cancelB(); <-doneB; ncB.Close() })
	awaitMembersSplit(t, ns, "srckey", 2)
	// A partition the first member (the one that started first) serves.
	ms, err := engine.Members(context.Background(), ns.JS, "srckey")
	if err != nil {
		t.Fatal(err)
	}
	first := ms[0]
	for _, m := range ms {
		if m.Started.Before(first.Started) {
			first = m
		}
	}
	p := first.Partitions[0]
	sameP := func(from, n int) []string { // n keys of partition p
		var out []string
		for i := from; len(out) < n; i++ {
			if k := fmt.Sprintf("k%d", i); stream.Partition(stream.OrderingKeyHeader(k), stream.DefaultPartitions) == p {
				out = append(out, k)
			}
		}
		return out
	}
	failing := sameP(900000, 1)[0]
	exec(t, db, `INSERT INTO srckeytest.block VALUES ('demo', $1)`, failing)
	publishVersion(t, ns, "demo", "failing-1", failing, 1, "")
	before := sameP(0, 200)
	for i, k := range before {
		publishVersion(t, ns, "demo", fmt.Sprintf("before-%d", i), k, 1, "")
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "the first member applied the keys behind the failing one", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied`) == len(before)
	})
	ncA.Close() // dies: its pins lapse, its unacked messages come back after ack_wait
	t.Cleanup(func() { cancelA(); <-doneA })
	after := sameP(100000, 300)
	for i, k := range after {
		publishVersion(t, ns, "demo", fmt.Sprintf("after-%d", i), k, 1, "")
	}
	hookbridgetest.Eventually(t, 90*time.Second, "every later event of the partition's other keys applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied`) == len(before)+len(after)
	})
	if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = $1`, failing); n != 0 {
		t.Fatalf("the failing key applied %d times while blocked", n)
	}
	exec(t, db, `DELETE FROM srckeytest.block`)
	hookbridgetest.Eventually(t, time.Minute, "the failing key applied once unblocked", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = $1`, failing) == 1
	})
}
