package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// handlerCall is one call of a handler: which consumer's, when, and the
// deadline of the context it was given.
type handlerCall struct {
	consumer    string
	at          time.Time
	deadline    time.Time
	hasDeadline bool
}

// callLog records every call of the handlers it makes.
type callLog struct {
	mu    sync.Mutex
	calls []handlerCall
}

// refusing registers "refuser" for thing.done: a handler that records
// each call and fails the event permanently, so that the event stays a
// dead letter and every replay of it calls the handler again.
func (l *callLog) refusing() app.Handlers {
	return app.Handlers{"refuser": {EventTypes: []string{"thing.done"}, New: func(name string) consumer.Handler {
		return consumer.HandlerFunc(func(ctx context.Context, _ pgx.Tx, _ consumer.Event) error {
			dl, ok := ctx.Deadline()
			l.mu.Lock()
			l.calls = append(l.calls, handlerCall{consumer: name, at: time.Now(), deadline: dl, hasDeadline: ok})
			l.mu.Unlock()
			return consumer.Permanent(errors.New("refused"))
		})
	}}}
}

// mark is how many calls were recorded so far.
func (l *callLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// since returns the calls of consumer name's handler after the first n.
func (l *callLog) since(n int, name string) []handlerCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []handlerCall
	for _, c := range l.calls[n:] {
		if c.consumer == name {
			out = append(out, c)
		}
	}
	return out
}

// `hookbridge replay` and the admin API's replay apply with the consumer
// options serve's consumer runs with: a consumer without handler_timeout
// gets the engine's default (30 s) on all three paths, and one with
// handler_timeout 17s gets 17 s on all three. A call's deadline is the
// start of its transaction plus the timeout, and that start lies between
// the moment the path was set going and the call, so the timeout is read
// exactly however loaded the machine is.
func TestReplayFromCLIAndAdminAPIUsesServesConsumerOptions(t *testing.T) {
	t.Parallel()
	const token = "replay-options-token-0123456789"
	const slowTimeout = 17 * time.Second
	timeouts := map[string]time.Duration{"plain": engine.DefaultHandlerTimeout, "slow": slowTimeout}
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "hookbridge.yaml")
	yaml := fmt.Sprintf(`database_url: %q
nats_url: %q
data_dir: %q
http_addr: 127.0.0.1:0
admin_addr: 127.0.0.1:0
admin_token: %q
sources:
  - name: acme
    scheme: github
    secrets: [acme-secret]
consumers:
  - name: plain
    handler: refuser
    sources: [acme]
  - name: slow
    handler: refuser
    sources: [acme]
    handler_timeout: %s
`, db.URL, ns.URL(), dir, token, slowTimeout)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &callLog{}
	handlers := log.refusing()
	cfg, err := app.Load(config, noEnv, app.Overrides{}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := runServer(t, cfg, handlers)

	// check asserts that path called consumer name's handler once after
	// the first n calls, with the consumer's timeout, path having been set
	// going at from.
	check := func(path, name string, n int, from time.Time) {
		t.Helper()
		calls := log.since(n, name)
		if len(calls) != 1 {
			t.Fatalf("%s: consumer %s's handler was called %d times, want once", path, name, len(calls))
		}
		c, timeout := calls[0], timeouts[name]
		if start := c.deadline.Add(-timeout); !c.hasDeadline || start.Before(from) || start.After(c.at) {
			t.Errorf("%s: consumer %s's handler, called at %v after a start at %v, had the deadline %v (set: %v): not a timeout of %s",
				path, name, c.at, from, c.deadline, c.hasDeadline, timeout)
		}
	}

	from := time.Now()
	ns.PublishHook(t, "acme", "evt-1", "thing.done", []byte(`{"n":1}`))
	db.AwaitCount(t, 2, `SELECT count(*) FROM hookbridge.dead_letters WHERE event_id = 'evt-1' AND resolved_at IS NULL`)
	for name := range timeouts {
		check("serve's consumer", name, 0, from)
	}

	for name := range timeouts {
		n, from := log.mark(), time.Now()
		code, out, errOut := runMainWith(t, handlers, "replay", "--consumer", name, "--dead-letters", "--config", config)
		if code == 0 || !strings.Contains(out+errOut, "refused") {
			t.Fatalf("replay --consumer %s --dead-letters: exit %d, want the handler's failure\n%s%s", name, code, out, errOut)
		}
		check("hookbridge replay", name, n, from)
	}

	api := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		code, b := adminCall(t, srv.AdminAddr(), token, method, path, body)
		return code, decodeObject(t, b)
	}
	for name := range timeouts {
		n, from := log.mark(), time.Now()
		code, started := api(http.MethodPost, "/api/v1/replay", map[string]any{"consumer": name, "dead_letters": true, "dry_run": false})
		job, _ := started["job_id"].(string)
		if code != http.StatusAccepted || job == "" {
			t.Fatalf("POST /api/v1/replay for %s: %d %v", name, code, started)
		}
		var state map[string]any
		hookbridgetest.Eventually(t, time.Minute, "the replay job of "+name+" to end", func() bool {
			_, state = api(http.MethodGet, "/api/v1/replay/"+job, nil)
			return state["state"] != "running"
		})
		if state["state"] != "failed" || !strings.Contains(fmt.Sprint(state["error"]), "failed") {
			t.Fatalf("replay job of %s: %v, want failed by the handler", name, state)
		}
		check("POST /api/v1/replay", name, n, from)
	}
}
