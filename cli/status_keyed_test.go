package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
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

// status prints a keyed consumer's partitions and its members with their
// backlog; a keyed event waiting while the consumer is paused counts in
// the member's backlog and in the consumer's oldest unacked message.
func TestStatusShowsKeyedConsumer(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	handlers := builtin.Handlers()
	cfg, err := app.Load("", noEnv, app.Overrides{DatabaseURL: db.URL, NATSURL: ns.URL(), DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0"}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := app.NewServer(cfg, handlers, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { addrc <- addr }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case <-addrc:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	flags := []string{"--database-url", db.URL, "--nats-url", ns.URL()}
	host, _ := os.Hostname()
	member := regexp.QuoteMeta(host) + `\s+` + regexp.QuoteMeta(itoa(os.Getpid())) + `\s+` + itoa(stream.DefaultPartitions) + `\s+`
	var out string
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
