package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A team's program (the command line with only its own handler) runs
// serve without a configuration file: it starts with the demo source and
// no consumer, and stops cleanly with exit 0. The default orders consumer
// would name a handler this program does not have.
func TestServeWithOnlyCustomHandlersAndNoConfigStarts(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	handlers := app.Handlers{"billing": {
		New: func(string) consumer.Handler {
			return consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return nil })
		},
		EventTypes: []string{"invoice.paid"},
	}}
	env := map[string]string{
		"HOOKBRIDGE_DATABASE_URL": db.URL,
		"HOOKBRIDGE_HTTP_ADDR":    "127.0.0.1:0",
		"HOOKBRIDGE_DATA_DIR":     t.TempDir(),
		"HOOKBRIDGE_DEMO_SECRET":  selftestSecret,
	}
	var stdout, stderr hookbridgetest.LogBuffer
	rt := &runtime{handlers: handlers, stdout: &stdout, stderr: &stderr, env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve"}, rt, func(code int) { t.Errorf("command line exited with %d", code) })
	}()

	hookbridgetest.Eventually(t, time.Minute, "serve started", func() bool {
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d before it started:\n%s", code, stderr.String())
		default:
		}
		return strings.Contains(stderr.String(), "hookbridge started")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit code %d, want 0:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "not a registered handler") {
		t.Fatalf("serve complained about a handler:\n%s", stderr.String())
	}
}
