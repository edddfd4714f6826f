package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The demo orders consumer is keyed: /metrics reports its partitions and
// its member (this process) labelled by the consumer, never a partition
// durable as a consumer of its own; while it is paused a keyed event
// counts in the consumer's pending, in its partition's and in the
// member's backlog.
func TestMetricsOfAKeyedConsumer(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	js := hookbridgetest.NATS(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL = db.URL
		c.NATSURL = js.URL()
	})
	srv := startServer(t, cfg, ordersHandlers())
	scrape := func() string {
		resp, err := http.Get("http://" + srv.addr + MetricsPath)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	parts := cfg.Streams.PartitionsOrDefault()
	host, _ := os.Hostname()
	has := func(body string, series ...string) bool {
		for _, s := range series {
			if !regexp.MustCompile(`(?m)^` + s + `$`).MatchString(body) {
				return false
			}
		}
		return true
	}
	var body string
	pinned := func() int {
		return strings.Count(body, `hookbridge_consumer_partition_pinned{consumer="orders",partition=`)
	}
	hookbridgetest.Eventually(t, time.Minute, "the keyed consumer's series", func() bool {
		body = scrape()
		return has(body, fmt.Sprintf(`hookbridge_consumer_partitions\{consumer="orders"\} %d`, parts),
			`hookbridge_consumer_members\{consumer="orders"\} 1`,
			fmt.Sprintf(`hookbridge_consumer_member_partitions\{consumer="orders",host="%s",member="\w+"\} %d`, regexp.QuoteMeta(host), parts)) &&
			pinned() == parts
	})
	if n := pinned(); n != parts {
		t.Errorf("%d partition_pinned series of orders, want %d", n, parts)
	}
	if strings.Contains(body, stream.PartitionDurable("orders", 0)) || strings.Contains(body, `~p`) {
		t.Errorf("a partition durable is named in /metrics:\n%s", body)
	}

	ctx := context.Background()
	o := opsFor(cfg, ordersHandlers(), db.Pool, js.JS, nil)
	if _, err := o.Pause(ctx, "orders", time.Time{}); err != nil {
		t.Fatal(err)
	}
	js.PublishKeyedHook(t, "demo", "evt-1", orders.Created, "o-1", orders.WebhookBody(orders.Created, "o-1", 100))
	p := stream.Partition(stream.OrderingKeyHeader("o-1"), parts)
	hookbridgetest.Eventually(t, time.Minute, "the paused event counted", func() bool {
		body = scrape()
		return has(body, `hookbridge_consumer_pending_messages\{consumer="orders"\} 1`,
			fmt.Sprintf(`hookbridge_consumer_partition_pending\{consumer="orders",partition="%d"\} 1`, p),
			`hookbridge_consumer_member_backlog\{consumer="orders",host="[^"]*",member="\w+"\} 1`,
			`hookbridge_consumer_paused\{consumer="orders"\} 1`)
	})
	if !has(body, `hookbridge_consumer_oldest_unacked_age_seconds\{consumer="orders"\} [0-9.e+-]+`) ||
		has(body, `hookbridge_consumer_oldest_unacked_age_seconds\{consumer="orders"\} 0`) {
		t.Errorf("the oldest unacked message of orders is not its paused event's age:\n%s", body)
	}
	if _, err := o.Resume(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, time.Minute, "the event applied", func() bool {
		return has(scrape(), `hookbridge_consumer_pending_messages\{consumer="orders"\} 0`,
			`hookbridge_consumer_ack_pending_messages\{consumer="orders"\} 0`,
			`hookbridge_consumer_member_backlog\{consumer="orders",host="[^"]*",member="\w+"\} 0`) &&
			db.Count(t, `SELECT count(*) FROM demo.orders`) == 1
	})
}
