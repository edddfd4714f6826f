package app

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/schema"
)

// testSecret is the Standard Webhooks reference library's test secret.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// ordersHandlers registers the demo orders handlers as the hookbridge
// binary does (cmd/hookbridge/builtin, which imports app and so cannot be
// imported by app's own tests).
func ordersHandlers() Handlers {
	return Handlers{"orders": {
		New:        func(name string) consumer.Handler { return orders.Handler(name) },
		EventTypes: []string{orders.Created, orders.Paid, orders.Cancelled},
		Migrations: []schema.Set{orders.Migrations()},
	}}
}

func mapEnv(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// testConfig is the zero-file configuration (the demo source with
// testSecret and the orders consumer) listening on a random port, changed
// by edit, validated against handlers.
func testConfig(t *testing.T, handlers Handlers, edit func(*Config)) Config {
	t.Helper()
	env := mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": testSecret})
	cfg := Config{HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir()}
	if edit != nil {
		edit(&cfg)
	}
	cfg.ApplyEnv(env)
	if len(cfg.Sources) == 0 {
		cfg.Sources = DefaultSources(env)
	}
	if cfg.Consumers == nil {
		cfg.Consumers = DefaultConsumers()
	}
	if err := cfg.Complete(env, handlers); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runningServer is a serve process inside the test.
type runningServer struct {
	*Server
	addr string
	stop func() error // cancels Run and returns its error; idempotent
}

// startServer runs NewServer(cfg, handlers, roles).Run until stop is
// called or the test ends, and returns once it listens.
func startServer(t *testing.T, cfg Config, handlers Handlers, roles ...string) *runningServer {
	t.Helper()
	srv, err := NewServer(cfg, handlers, roles, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	return startPrepared(t, srv)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startPrepared runs srv (made by NewServer, possibly adjusted) like
// [startServer].
func startPrepared(t *testing.T, srv *Server) *runningServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(a string) { addrCh <- a }) }()
	var addr string
	select {
	case addr = <-addrCh:
	case err := <-done:
		cancel()
		t.Fatalf("serve did not start: %v", err)
	}
	var stopped bool
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &runningServer{Server: srv, addr: addr, stop: stop}
}
