package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A keyed consumer's figures are those of its partition durables and its
// own durable together, in status (the one read of the command line and
// the admin API) and the metrics: with
// nothing left to apply its ack floor is the last message it acked (not
// its own durable's 0), and paused with one event waiting in a partition
// that had none before, its oldest unacked message is that event (not
// the stream's first message, applied long ago in another partition),
// and its ack floor is that partition's.
func TestKeyedConsumerFiguresAreItsDurablesTogether(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	js := hookbridgetest.NATS(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL = db.URL
		c.NATSURL = js.URL()
	})
	srv := startServer(t, cfg, ordersHandlers())
	ctx := context.Background()
	parts := cfg.Streams.PartitionsOrDefault()
	o := opsFor(cfg, ordersHandlers(), db.Pool, js.JS, nil)
	readStatus := func() ops.ConsumerStatus {
		t.Helper()
		st, err := o.Status(ctx, nil)
		if err != nil || st.JetStreamError != "" {
			t.Fatalf("status: %v %s", err, st.JetStreamError)
		}
		for _, c := range st.Consumers {
			if c.Stream == stream.Hooks && c.Name == "orders" {
				return c
			}
		}
		return ops.ConsumerStatus{}
	}
	hookbridgetest.Eventually(t, time.Minute, "the keyed consumer's partition durables", func() bool {
		return len(readStatus().Partitions) == parts
	})

	// Three events of one key, applied: one partition acks up to the
	// third, the other partitions and the own durable acked nothing.
	var last uint64
	for i := 1; i <= 3; i++ {
		last = js.PublishKeyedHook(t, "demo", fmt.Sprintf("evt-%d", i), orders.Created, "o-1", orders.WebhookBody(orders.Created, "o-1", int64(100*i)))
	}
	db.AwaitCount(t, 3, `SELECT count(*) FROM hookbridge.inbox`)
	var c ops.ConsumerStatus
	hookbridgetest.Eventually(t, time.Minute, "the applied events acked", func() bool {
		c = readStatus()
		return c.Pending == 0 && c.AckPending == 0 && c.AckFloorSeq == last
	})
	if c.OldestUnackedAgeSeconds != 0 {
		t.Errorf("idle consumer: oldest unacked %.3fs, want 0", c.OldestUnackedAgeSeconds)
	}

	// The first message must be clearly older than the one that will
	// wait, so that reporting its age cannot pass for the right answer.
	hooks, err := js.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	first, err := hooks.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, time.Minute, "the first message 3s old", func() bool { return time.Since(first.Time) > 3*time.Second })

	if _, err := o.Pause(ctx, "orders", time.Time{}); err != nil {
		t.Fatal(err)
	}
	pOne := stream.Partition(stream.OrderingKeyHeader("o-1"), parts)
	key := ""
	for i := 2; key == ""; i++ {
		if k := "o-" + strconv.Itoa(i); stream.Partition(stream.OrderingKeyHeader(k), parts) != pOne {
			key = k
		}
	}
	q := stream.Partition(stream.OrderingKeyHeader(key), parts)
	seq := js.PublishKeyedHook(t, "demo", "evt-w", orders.Created, key, orders.WebhookBody(orders.Created, key, 100))
	waiting, err := hooks.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, time.Minute, "the waiting event counted", func() bool {
		c = readStatus()
		return c.Paused && c.Pending+uint64(c.AckPending) == 1
	})
	bound := time.Since(waiting.Time) // the waiting event's age is at most this when status was read
	var qFloor uint64
	for _, p := range c.Partitions {
		if p.Partition == q {
			qFloor = p.AckFloorSeq
		}
	}
	if c.OldestUnackedAgeSeconds <= 0 || c.OldestUnackedAgeSeconds > bound.Seconds() {
		t.Errorf("status: oldest unacked %.3fs, want the waiting event's age, in (0, %.3fs] (the first message is %s old)",
			c.OldestUnackedAgeSeconds, bound.Seconds(), time.Since(first.Time).Round(time.Millisecond))
	}
	if c.AckFloorSeq != qFloor || c.AckFloorSeq >= seq {
		t.Errorf("status: ack floor %d, want partition %d's %d (below the waiting seq %d)", c.AckFloorSeq, q, qFloor, seq)
	}

	resp, err := http.Get("http://" + srv.addr + MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bound = time.Since(waiting.Time)
	m := regexp.MustCompile(`(?m)^hookbridge_consumer_oldest_unacked_age_seconds\{consumer="orders"\} (\S+)$`).FindStringSubmatch(string(body))
	if m == nil {
		t.Fatalf("no oldest unacked series of orders:\n%s", body)
	}
	if age, err := strconv.ParseFloat(m[1], 64); err != nil || age <= 0 || age > bound.Seconds() {
		t.Errorf("metrics: oldest unacked %s, want the waiting event's age, in (0, %.3fs]", m[1], bound.Seconds())
	}

	if _, err := o.Resume(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	db.AwaitCount(t, 4, `SELECT count(*) FROM hookbridge.inbox`)
	hookbridgetest.Eventually(t, time.Minute, "the waiting event acked", func() bool {
		c = readStatus()
		return c.Pending == 0 && c.AckPending == 0 && c.AckFloorSeq == seq
	})
}
