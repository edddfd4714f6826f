package app

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestPausedPastMaxAgeLosesNothing: "accepted means kept" does not end at
// max_age. A consumer is paused, deliveries are answered 202, and the
// pause lasts past max_age (2 s here): HOOKS keeps every message, and
// after the resume every one is applied (rows counted). Then, applied and
// older than max_age, they are trimmed: age is the horizon of applied
// messages. With JetStream's own max age on HOOKS, the messages were
// deleted unapplied while the consumer was paused.
func TestPausedPastMaxAgeLosesNothing(t *testing.T) {
	t.Parallel()
	const maxAge, n = 2 * time.Second, 20
	db := hookbridgetest.Postgres(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL = db.URL
		c.Streams.MaxAge, c.Streams.DuplicateWindow = maxAge, time.Second
	})
	srv := startFastGuard(t, cfg)
	hookbridgetest.Eventually(t, time.Minute, "serve ready", func() bool { return readyStatus(t, srv.addr, "") == http.StatusOK })
	ctx := context.Background()
	// The demo source is keyed: orders reads it through partition durables,
	// which the pause takes along once serve has made them all.
	want := 1 + cfg.ConsumerPartitions(&cfg.Consumers[0])
	hookbridgetest.Eventually(t, time.Minute, "every durable of orders made", func() bool {
		return len(ordersDurables(t, srv)) == want
	})
	o := opsFor(cfg, ordersHandlers(), db.Pool, srv.JetStream(), nil)
	if _, err := o.Pause(ctx, "orders", time.Time{}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		id := fmt.Sprintf("paused-%d", i)
		if code := postOrder(t, srv.addr, id, id); code != http.StatusAccepted {
			t.Fatalf("%s: status %d, want 202", id, code)
		}
		ids = append(ids, id)
	}
	// Past max_age and its slack, with the guard looking every 50 ms.
	last := streamInfo(t, srv.JetStream(), stream.Hooks).State.LastTime
	time.Sleep(time.Until(last.Add(maxAge + time.Second)))
	info := streamInfo(t, srv.JetStream(), stream.Hooks)
	if info.State.Msgs != n {
		t.Fatalf("paused past max_age: HOOKS holds %d messages, want all %d", info.State.Msgs, n)
	}
	if got := db.Count(t, "SELECT count(*) FROM demo.orders"); got != 0 {
		t.Fatalf("paused, yet %d orders applied", got)
	}
	if _, err := o.Resume(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, 60*time.Second, "every accepted delivery applied after the resume", func() bool {
		return db.Count(t, "SELECT count(*) FROM demo.orders") >= n
	})
	if got := db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = ANY($1)", ids); got != n {
		t.Fatalf("%d of the %d accepted orders applied", got, n)
	}
	hookbridgetest.Eventually(t, 60*time.Second, "the applied messages older than max_age trimmed", func() bool {
		return streamInfo(t, srv.JetStream(), stream.Hooks).State.Msgs == 0
	})
}

// TestHooksDefaultBoundIsHalfTheStore: without streams.max_bytes, HOOKS
// takes half the embedded server's store as its byte bound; EVENTS has
// none of its own.
func TestHooksDefaultBoundIsHalfTheStore(t *testing.T) {
	t.Parallel()
	srv := startServer(t, testConfig(t, ordersHandlers(), nil), ordersHandlers(), RoleIngress)
	store := srv.embedded.JetStreamConfig().MaxStore
	if got, want := streamInfo(t, srv.JetStream(), stream.Hooks).Config.MaxBytes, int64(stream.HooksStoreShare*float64(store)); got != want || want <= 0 {
		t.Fatalf("HOOKS max bytes %d, want %d (half the store of %d)", got, want, store)
	}
	if got := streamInfo(t, srv.JetStream(), stream.Events).Config.MaxBytes; got != -1 {
		t.Fatalf("EVENTS max bytes %d, want none", got)
	}
}

// ordersDurables are the durables on HOOKS of consumer orders: its own
// and its partition durables.
func ordersDurables(t *testing.T, srv *runningServer) []string {
	t.Helper()
	hooks, err := srv.JetStream().Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name := range hooks.ConsumerNames(context.Background()).Name() {
		if owner, _ := stream.ConsumerOfDurable(name); owner == "orders" {
			out = append(out, name)
		}
	}
	return out
}
