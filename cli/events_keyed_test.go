package cli

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// serveDemo runs serve on the zero-file configuration (the keyed demo
// source and the orders consumer) until the test ends, once the orders
// consumer's partition durables are there; it returns the flags that
// point the operator commands at it.
func serveDemo(t *testing.T) (*hookbridgetest.Database, *hookbridgetest.JetStream, []string) {
	t.Helper()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	handlers := builtin.Handlers()
	cfg, err := app.Load("", noEnv, app.Overrides{DatabaseURL: db.URL, NATSURL: ns.URL(), DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0"}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, cfg, handlers)
	flags := []string{"--database-url", db.URL, "--nats-url", ns.URL()}
	hookbridgetest.Eventually(t, time.Minute, "the orders consumer's partition durables", func() bool {
		out, err := runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && regexpLine(out, `^KEYED orders: `+itoa(stream.DefaultPartitions)+` partitions`)
	})
	return db, ns, flags
}

// `events show` of a keyed event that is stored and not applied yet (the
// consumer paused) finds it on its partition's subject and says it is
// pending at the consumer, with its sequence; so does a keyed event whose
// partition waits while the consumer's own durable has acked unkeyed
// messages past it.
func TestEventsShowFindsAPendingKeyedEvent(t *testing.T) {
	t.Parallel()
	db, ns, flags := serveDemo(t)
	if _, err := runOps(t, append([]string{"consumers", "pause", "orders"}, flags...)...); err != nil {
		t.Fatal(err)
	}
	seq := ns.PublishKeyedHook(t, "demo", "evt-3", orders.Created, "o-3", orders.WebhookBody(orders.Created, "o-3", 100))
	subject := stream.KeyedHookSubject(stream.Partition(stream.OrderingKeyHeader("o-3"), stream.DefaultPartitions), "demo", orders.Created)
	out, err := runOps(t, append([]string{"events", "show", "demo", "evt-3"}, flags...)...)
	if err != nil {
		t.Fatalf("events show of a pending keyed event: %v\n%s", err, out)
	}
	s := strconv.FormatUint(seq, 10)
	if !regexpLine(out, `^demo/evt-3 stored in HOOKS at seq `+s+`, subject `+regexp.QuoteMeta(subject)+`, received `) ||
		!regexpLine(out, `^orders\s+pending\s+`+s+`\s`) {
		t.Fatalf("events show of a pending keyed event, want it stored at seq %s on %s and pending at orders:\n%s", s, subject, out)
	}
	if _, err := runOps(t, append([]string{"consumers", "resume", "orders"}, flags...)...); err != nil {
		t.Fatal(err)
	}
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'evt-3'`)

	// Only the partition of o-4 waits; an unkeyed event of the demo
	// source (stored before its key was configured, say) is applied by
	// the consumer's own durable, whose ack floor passes the keyed one.
	ctx := context.Background()
	p := stream.Partition(stream.OrderingKeyHeader("o-4"), stream.DefaultPartitions)
	if _, err := ns.JS.PauseConsumer(ctx, stream.Hooks, stream.PartitionDurable("orders", p), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	kSeq := ns.PublishKeyedHook(t, "demo", "evt-4", orders.Created, "o-4", orders.WebhookBody(orders.Created, "o-4", 100))
	uSeq := ns.PublishHook(t, "demo", "evt-5", orders.Created, orders.WebhookBody(orders.Created, "o-5", 100))
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'evt-5'`)
	hookbridgetest.Eventually(t, time.Minute, "the own durable's ack floor past the keyed event", func() bool {
		c, err := ns.JS.Consumer(ctx, stream.Hooks, "orders")
		return err == nil && c.CachedInfo().AckFloor.Stream >= uSeq
	})
	out, err = runOps(t, append([]string{"events", "show", "demo", "evt-4"}, flags...)...)
	if k := strconv.FormatUint(kSeq, 10); err != nil || !regexpLine(out, `^orders\s+pending\s+`+k+`\s`) {
		t.Fatalf("events show of a keyed event waiting in its partition (%v), want it pending at orders, seq %s:\n%s", err, k, out)
	}
}
