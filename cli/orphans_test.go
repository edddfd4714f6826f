package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A durable on HOOKS that no configured consumer owns is shown as
// orphaned by status (text and JSON) and can be deleted; a configured
// consumer's durables (its partition durables too) are neither, and a
// durable a client pulls from is not deleted.
func TestOrphanedDurablesShownAndDeleted(t *testing.T) {
	t.Parallel()
	_, ns, flags := opsEnv(t)
	ctx := context.Background()
	keyed := []string{stream.PartitionDurable("old_keyed", 0), stream.PartitionDurable("old_keyed", 1)} // partitions only
	for _, name := range append([]string{"orders", stream.PartitionDurable("orders", 1), "old_orders", "pulled"}, keyed...) {
		if _, err := ns.JS.CreateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	pulled, err := ns.JS.Consumer(ctx, stream.Hooks, "pulled")
	if err != nil {
		t.Fatal(err)
	}
	it, err := pulled.Messages()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	go func() { _, _ = it.Next() }() // a pull request waits on the server
	hookbridgetest.Eventually(t, time.Minute, "a pull request waiting", func() bool {
		ci, err := pulled.Info(ctx)
		return err == nil && ci.NumWaiting > 0
	})

	out, err := runOps(t, append([]string{"status", "--json"}, flags...)...)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	if want := append(slices.Clone(keyed), "old_orders", "pulled"); !slices.Equal(st.OrphanedDurables, want) {
		t.Fatalf("orphaned durables %v, want %v", st.OrphanedDurables, want)
	}
	for _, c := range st.Consumers {
		if want := c.Name == "old_orders" || c.Name == "pulled" || c.Name == "old_keyed"; c.Orphaned != want {
			t.Errorf("consumer %s: orphaned %v, want %v", c.Name, c.Orphaned, want)
		}
	}
	out, err = runOps(t, append([]string{"status"}, flags...)...)
	if err != nil || !regexpLine(out, `^HOOKS\s+old_orders \(orphaned\)\s`) || !strings.Contains(out, "ORPHANED: durable old_orders on HOOKS") {
		t.Fatalf("status text: %v\n%s", err, out)
	}

	for name, want := range map[string]string{
		"orders":                             "configured consumer orders",
		stream.PartitionDurable("orders", 1): "configured consumer orders",
		"pulled":                             "a client pulls from pulled",
		"nobody":                             "not found",
	} {
		if _, err := runOps(t, append([]string{"consumers", "delete", name}, flags...)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("delete %s: %v, want an error saying %q", name, err, want)
		}
	}
	out, err = runOps(t, append([]string{"consumers", "delete", "old_orders", "--json"}, flags...)...)
	if err != nil || !strings.Contains(out, `"name": "old_orders"`) {
		t.Fatalf("delete old_orders: %v\n%s", err, out)
	}
	// A consumer's name takes its partition durables along.
	out, err = runOps(t, append([]string{"consumers", "delete", "old_keyed"}, flags...)...)
	if err != nil || !strings.Contains(out, "deleted "+strings.Join(keyed, ", ")+" from HOOKS") {
		t.Fatalf("delete old_keyed: %v\n%s", err, out)
	}
	for name, want := range map[string]bool{"old_orders": false, "orders": true, stream.PartitionDurable("orders", 1): true, "pulled": true,
		keyed[0]: false, keyed[1]: false} {
		_, err := ns.JS.Consumer(ctx, stream.Hooks, name)
		if got := err == nil; got != want {
			t.Errorf("durable %s exists: %v, want %v (err %v)", name, got, want, err)
		}
	}
}
