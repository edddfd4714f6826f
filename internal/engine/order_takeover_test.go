package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// hangFirst hangs in the first version of every key until release
// closes, counting in hanging the versions it holds.
type hangFirst struct {
	versionHandler
	release <-chan struct{}
	hanging *atomic.Int32
}

func (h hangFirst) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b versionBody
	if json.Unmarshal(ev.Body, &b) == nil && b.V == 1 {
		h.hanging.Add(1)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.versionHandler.Handle(ctx, tx, ev)
}

// Member b applies v1 of two keys (one in an even partition, one in an
// odd one) in a handler that hangs; member a joins and takes one of the
// two partitions over while b still holds that v1 (b's drain waits for
// the batch; its pin lapses). Newer versions keep arriving at a. a must
// apply none of them before b's v1 commits.
func TestKeyedTakeoverWhileTheOldOwnerHolds(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	var keys []string
	seen := map[int]bool{}
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("key%d", i)
		par := stream.Partition(stream.OrderingKeyHeader(k), stream.DefaultPartitions) % 2
		if !seen[par] {
			seen[par] = true
			keys = append(keys, k)
		}
	}
	release := make(chan struct{})
	attempts := &sync.Map{}
	start := func(name string, h consumer.Handler) {
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		c, err := engine.New(db.Pool, js, engine.Options{Name: "versions", EventTypes: []string{"version.set"}, Handler: h,
			Partitions: stream.DefaultPartitions, BatchSize: 1, HandlerTimeout: 5 * time.Minute, MaxAckPending: 1 << 20,
			Logger: slog.New(slog.NewTextHandler(tlog{t, name}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = c.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done; nc.Close() })
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	var hanging atomic.Int32
	start("b", hangFirst{versionHandler{member: "b", attempts: attempts, dead: new(atomic.Bool)}, release, &hanging})
	want := map[string]int{}
	var mu sync.Mutex
	publish := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			want[k]++
			body, _ := json.Marshal(versionBody{Key: k, V: want[k]})
			ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-v%d", k, want[k]), "version.set", k, body)
		}
	}
	publish()
	hookbridgetest.Eventually(t, time.Minute, "b holding both v1 in hanging batches", func() bool { return hanging.Load() >= 2 })
	start("a", versionHandler{member: "a", attempts: attempts, dead: new(atomic.Bool)})
	stop := time.Now().Add(25 * time.Second) // past b's pin (pinnedTTL)
	for time.Now().Before(stop) {
		for range 40 {
			publish()
		}
		time.Sleep(100 * time.Millisecond)
		if n := db.Count(t, `SELECT count(*) FROM ordertest.log`); n > 0 {
			t.Logf("%d applies while b still holds v1 of both keys", n)
			break
		}
	}
	close(release)
	total := 0
	for _, v := range want {
		total += v
	}
	hookbridgetest.Eventually(t, 3*time.Minute, "every version applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == total
	})
	checkOrder(t, db, want, nil)
}

type tlog struct {
	t    *testing.T
	name string
}

func (l tlog) Write(p []byte) (int, error) {
	l.t.Logf("[%s %s] %s", time.Now().Format("15:04:05.000"), l.name, p)
	return len(p), nil
}

// Member b holds a key's messages unapplied (its handler keeps failing,
// transiently) and dies; a takes the partition over. The messages b held
// come back only after ack_wait (longer than b's pin), and a pulls the
// key's later messages
// meanwhile: those wait behind them without filling a's window, or a
// would stop pulling and never get them back.
func TestKeyedTakeoverPullsPastAFullWindow(t *testing.T) {
	t.Parallel()
	const n = 300
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	attempts := &sync.Map{}
	longAck := func(o *engine.Options) { o.AckWait = 25 * time.Second }
	b := startMemberWith(t, db, ns, "b", attempts, 1, longAck)
	b.dead.Store(true)
	const key = "k"
	for v := 1; v <= n; v++ {
		body, _ := json.Marshal(versionBody{Key: key, V: v})
		ns.PublishKeyedHook(t, "demo", fmt.Sprintf("%s-v%d", key, v), "version.set", key, body)
	}
	durable := stream.PartitionDurable("versions", stream.Partition(stream.OrderingKeyHeader(key), stream.DefaultPartitions))
	hookbridgetest.Eventually(t, time.Minute, "b holds messages of the key", func() bool {
		c, err := ns.JS.Consumer(context.Background(), stream.Hooks, durable)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending >= 16
	})
	b.kill()
	startMemberWith(t, db, ns, "a", attempts, 1, longAck)
	hookbridgetest.Eventually(t, 90*time.Second, "every version applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == n
	})
	checkOrder(t, db, map[string]int{key: n}, nil)
}
