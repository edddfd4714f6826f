package app

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A consumer whose key was turned off and that still drains a keyed
// event through its partition durables reports that event in its
// metrics, as status does.
func TestMetricsOfAKeylessConsumerCountItsPartitionDurables(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	// order.paid of an order that does not exist: postponed, it stays.
	js.PublishKeyedHook(t, "demo", "paid-1", orders.Paid, "o-1", orders.WebhookBody(orders.Paid, "o-1", 100))
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL, c.NATSURL = db.URL, js.URL()
		c.Sources = DefaultSources(mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": testSecret}))
		c.Sources[0].OrderingKey = &KeyConfig{None: true}
	})
	srv := startServer(t, cfg, ordersHandlers())
	ctx := context.Background()
	pending := regexp.MustCompile(`(?m)^hookbridge_consumer_(?:pending|ack_pending)_messages\{consumer="orders"\} (\S+)$`)
	hookbridgetest.Eventually(t, time.Minute, "the metrics count the keyed event the partitions hold", func() bool {
		st, err := srv.consumerState(ctx, "orders")
		if err != nil || st.Pending+uint64(st.AckPending) != 1 {
			return false
		}
		resp, err := http.Get("http://" + srv.addr + MetricsPath)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, m := range pending.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "0" {
				return true
			}
		}
		return false
	})
}
