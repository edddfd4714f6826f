package app

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A program that registers only handlers of its own and runs without a
// configuration file gets the demo source and no consumer, and starts:
// the example orders consumer is a default only where a handler called
// orders is registered. (Added always, it would make Load fail with
// consumers[0].handler: "orders" is not a registered handler.)
func TestCustomHandlersStartWithoutConfigFile(t *testing.T) {
	t.Parallel()
	billing := Handlers{"billing": {
		New: func(string) consumer.Handler {
			return consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return nil })
		},
		EventTypes: []string{"invoice.paid"},
	}}
	db := hookbridgetest.Postgres(t)
	env := mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": testSecret})
	over := Overrides{HTTPAddr: "127.0.0.1:0", DatabaseURL: db.URL, DataDir: t.TempDir()}
	cfg, err := Load("", env, over, billing)
	if err != nil {
		t.Fatalf("load with custom handlers and no file: %v", err)
	}
	if len(cfg.Consumers) != 0 || len(cfg.Sources) != 1 || cfg.Sources[0].Name != "demo" {
		t.Fatalf("consumers %+v, sources %+v: want none and demo", cfg.Consumers, cfg.Sources)
	}
	srv := startServer(t, cfg, billing)
	hookbridgetest.Eventually(t, time.Minute, "serve with custom handlers ready", func() bool {
		return readyStatus(t, srv.addr, "") == http.StatusOK
	})
	if err := srv.stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}

	// With the orders handler registered the default consumer is there.
	cfg, err = Load("", env, over, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Consumers) != 1 || cfg.Consumers[0].Handler != "orders" {
		t.Fatalf("consumers with orders registered = %+v", cfg.Consumers)
	}
}
