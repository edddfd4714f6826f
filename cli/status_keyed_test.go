package cli

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// status prints a keyed consumer's partitions and its members with their
// backlog; a keyed event waiting while the consumer is paused counts in
// the member's backlog and in the consumer's oldest unacked message.
func TestStatusShowsKeyedConsumer(t *testing.T) {
	t.Parallel()
	_, ns, flags := serveDemo(t)
	host, _ := os.Hostname()
	member := regexp.QuoteMeta(host) + `\s+` + regexp.QuoteMeta(itoa(os.Getpid())) + `\s+` + itoa(stream.DefaultPartitions) + `\s+`
	var out string
	var err error
	hookbridgetest.Eventually(t, time.Minute, "the keyed consumer in status", func() bool {
		out, err = runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && regexpLine(out, `^KEYED orders: `+itoa(stream.DefaultPartitions)+` partitions, \d+ pinned; 1 member\(s\)$`) && regexpLine(out, `^\w+\s+`+member+`0\s+\S+$`)
	})
	if _, err := runOps(t, append([]string{"consumers", "pause", "orders"}, flags...)...); err != nil {
		t.Fatal(err)
	}
	ns.PublishKeyedHook(t, "demo", "evt-1", orders.Created, "o-1", orders.WebhookBody(orders.Created, "o-1", 100))
	hookbridgetest.Eventually(t, time.Minute, "the paused event in the member's backlog", func() bool {
		out, err = runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && regexpLine(out, `^\w+\s+`+member+`1\s+\S+$`) && regexpLine(out, `^HOOKS\s+orders \(paused\)\s+1\s+0\s+0\s+0\s+0\s+\d+\s+\d+s\s+0$`)
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
