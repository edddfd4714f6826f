package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// ordering_key takes a pointer, a header or "none"; unset, the scheme's
// default applies (Stripe's object id, Shopify's resource id, none for the
// others); the demo source is keyed by its order id.
func TestOrderingKeyConfig(t *testing.T) {
	t.Parallel()
	var c Config
	src := `
sources:
  - {name: a, scheme: github, secrets: [x], ordering_key: {pointer: /repository/id}}
  - {name: b, scheme: github, secrets: [x], ordering_key: {header: X-Entity}}
  - {name: c, scheme: stripe, secrets: [x], ordering_key: none}
  - {name: d, scheme: stripe, secrets: [x]}
  - {name: e, scheme: github, secrets: [x]}
`
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	want := map[string]*bridge.Field{
		"a": {Pointer: "/repository/id"}, "b": {Header: "X-Entity"}, "c": nil, "d": {Pointer: "/data/object/id"}, "e": nil,
	}
	for i := range c.Sources {
		s := &c.Sources[i]
		got, w := s.orderingKey(), want[s.Name]
		if (got == nil) != (w == nil) || (got != nil && *got != *w) {
			t.Errorf("source %s: ordering key %+v, want %+v", s.Name, got, w)
		}
	}
	if got := strings.Join(c.KeyedSources(), ","); got != "a,b,d" {
		t.Errorf("keyed sources %s, want a,b,d", got)
	}
	if err := yaml.Unmarshal([]byte("sources: [{name: a, ordering_key: yes}]"), &c); err == nil || !strings.Contains(err.Error(), "ordering_key") {
		t.Errorf("ordering_key: yes was accepted (%v)", err)
	}
	demo := DefaultSources(mapEnv(nil))[0]
	if k := demo.orderingKey(); k == nil || k.Pointer != "/data/order_id" {
		t.Errorf("demo source key %+v, want /data/order_id", k)
	}
	bad := testConfigErr(func(c *Config) { c.Streams.Partitions = stream.MaxPartitions + 1 })
	if bad == nil || !strings.Contains(bad.Error(), "streams.partitions") {
		t.Errorf("partitions above the maximum: %v", bad)
	}
}

func testConfigErr(edit func(*Config)) error {
	env := mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": testSecret})
	cfg := Config{HTTPAddr: "127.0.0.1:0"}
	edit(&cfg)
	cfg.ApplyEnv(env)
	cfg.Sources = DefaultSources(env)
	return cfg.Complete(env, ordersHandlers())
}

// A server too old for ordered consumption is refused at start, naming
// its version, when a source has an ordering key; without keys the same
// server is fine. The machine's system nats-server (2.9) is that server
// when HOOKBRIDGE_COMPAT_NATS_URL names it; the version rule itself is
// checked either way.
func TestOldServerRefusedForOrderingKeys(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{"2.9.25": false, "2.10.29": false, "2.11.0": true, "v2.12.1": true, "2.15.2": true, "3.0.0": true} {
		if stream.ServerAtLeast(v, stream.MinOrderedServer) != ok {
			t.Errorf("ServerAtLeast(%s, %s) != %v", v, stream.MinOrderedServer, ok)
		}
	}
	url := os.Getenv("HOOKBRIDGE_COMPAT_NATS_URL")
	if url == "" {
		return // the embedded server is recent; CI sets the URL of an old one
	}
	db := hookbridgetest.Postgres(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) { c.DatabaseURL, c.NATSURL = db.URL, url })
	srv, err := NewServer(cfg, ordersHandlers(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = srv.Run(ctx, nil)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "nats-server 2.11.0 or later") ||
		!strings.Contains(err.Error(), "demo") {
		t.Fatalf("serve on an old server with a keyed source: %v; want a refusal naming the version and the source", err)
	}
	t.Logf("refused: %v", err)
}

// An unset streams.partitions is the number HOOKS was created with, so a
// deployment keeps its partitions when the default changes; a configured
// number that differs is refused, naming both.
func TestUnsetPartitionsKeepWhatHooksRecords(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	dir := t.TempDir()
	config := func(n int) Config {
		return testConfig(t, ordersHandlers(), func(c *Config) {
			c.DatabaseURL, c.DataDir, c.Streams.Partitions = db.URL, dir, n
		})
	}
	first := startServer(t, config(7), ordersHandlers())
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	second := startServer(t, config(0), ordersHandlers())
	if got := second.cfg.Streams.Partitions; got != 7 {
		t.Errorf("unset partitions ran with %d, want the 7 HOOKS records", got)
	}
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(config(5), ordersHandlers(), nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Run(ctx, func(string) {}); !errors.Is(err, stream.ErrPartitionsChanged) {
		t.Fatalf("5 partitions on a HOOKS of 7: %v, want %v", err, stream.ErrPartitionsChanged)
	}
}
