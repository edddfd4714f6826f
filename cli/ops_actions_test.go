package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/publisher"
)

// While serve runs with the embedded server (no NATS URL anywhere), the
// operator commands reach it through the loopback listener it announces
// in data_dir/ops.json; when it stops, the file is gone and they say how
// to proceed.
func TestOpsCommandsAgainstRunningEmbeddedServe(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	dataDir := t.TempDir()
	handlers := builtin.Handlers()
	cfg, err := app.Load("", noEnv, app.Overrides{DatabaseURL: db.URL, DataDir: dataDir, HTTPAddr: "127.0.0.1:0"}, handlers)
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
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}
	t.Cleanup(stop)

	info, err := os.Stat(filepath.Join(dataDir, app.OpsEndpointFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("ops.json: %v, mode %v; want 0600", err, info)
	}
	ep, err := app.ReadOpsEndpoint(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := url.Parse(ep.URL); err != nil || u.Hostname() != "127.0.0.1" || ep.Password == "" {
		t.Fatalf("ops endpoint %q (password set: %v): not loopback with a password", ep.URL, ep.Password != "")
	}

	flags := []string{"--database-url", db.URL, "--data-dir", dataDir, "--http-addr", addr}
	if _, err := runOps(t, append([]string{"send", "--type", orders.Created, "--id", "evt-1", "--data", `{"order_id":"o-1","amount_cents":100,"currency":"EUR"}`}, flags...)...); err != nil {
		t.Fatalf("send: %v", err)
	}
	hookbridgetest.Eventually(t, time.Minute, "event applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'evt-1'`) == 1
	})

	// The ack follows the commit: the durable's figures settle after the
	// inbox row shows.
	var out string
	hookbridgetest.Eventually(t, time.Minute, "status with the event acked", func() bool {
		out, err = runOps(t, append([]string{"status"}, flags...)...)
		return err == nil && regexpLine(out, `^HOOKS\s+1\s`) && regexpLine(out, `^HOOKS\s+orders\s+0\s+0\s`)
	})
	if err != nil || !regexpLine(out, `^HOOKS\s+1\s`) || !regexpLine(out, `^HOOKS\s+orders\s+0\s+0\s`) {
		t.Fatalf("status against the running serve: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"replay", "--consumer", "orders", "--from-seq", "1", "--dry-run"}, flags...)...)
	if err != nil || !regexpLine(out, `^duplicate\s+1$`) || !strings.Contains(out, "evt-1") {
		t.Fatalf("replay --dry-run against the running serve: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"events", "show", "demo", "evt-1"}, flags...)...)
	if err != nil || !regexpLine(out, `^orders\s+processed\s+1\s`) {
		t.Fatalf("events show: %v\n%s", err, out)
	}
	// The serve's own store is not opened a second time.
	if _, err := runOps(t, append([]string{"status", "--embedded"}, flags...)...); err == nil || !strings.Contains(err.Error(), "owns the store") {
		t.Fatalf("status --embedded while serve runs: %v", err)
	}

	stop()
	if _, err := os.Stat(filepath.Join(dataDir, app.OpsEndpointFile)); !os.IsNotExist(err) {
		t.Fatalf("ops.json after shutdown: %v", err)
	}
	if _, err := runOps(t, append([]string{"status"}, flags...)...); err == nil || !strings.Contains(err.Error(), "--embedded") {
		t.Fatalf("status after serve stopped: %v", err)
	}
	out, err = runOps(t, append([]string{"status", "--embedded"}, flags...)...)
	if err != nil || !regexpLine(out, `^HOOKS\s+1\s`) {
		t.Fatalf("status --embedded after serve stopped: %v\n%s", err, out)
	}
}

// The action commands do what the admin API does, with the same
// idempotence, counted in the tables.
func TestActionCommands(t *testing.T) {
	t.Parallel()
	db, ns, flags := opsEnv(t)
	ctx := context.Background()
	ns.PublishHook(t, "demo", "c1", orders.Created, orders.WebhookBody(orders.Created, "o-p1", 100))
	for _, id := range []string{"p1", "p2"} {
		seq := ns.PublishHook(t, "demo", id, orders.Paid, orders.WebhookBody(orders.Paid, "o-"+id, 100))
		if err := engine.RecordDeadLetter(ctx, db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo", EventID: id,
			EventType: orders.Paid, StreamSeq: seq, Deliveries: 3, Reason: engine.ReasonMaxDeliver, LastError: "unknown order"}); err != nil {
			t.Fatal(err)
		}
	}
	var p1, p2 int64
	_ = db.Pool.QueryRow(ctx, `SELECT id FROM hookbridge.dead_letters WHERE event_id = 'p1'`).Scan(&p1)
	_ = db.Pool.QueryRow(ctx, `SELECT id FROM hookbridge.dead_letters WHERE event_id = 'p2'`).Scan(&p2)
	paid := func() int { return db.Count(t, `SELECT count(*) FROM demo.orders WHERE status = 'paid'`) }

	if _, err := runOps(t, append([]string{"dead-letters", "requeue", fmt.Sprint(p1)}, flags...)...); err == nil || !strings.Contains(err.Error(), "unknown order") {
		t.Fatalf("requeue before the fix: %v", err)
	}
	if _, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--event-id", "c1"}, flags...)...); err != nil {
		t.Fatal(err)
	}
	out, err := runOps(t, append([]string{"dead-letters", "requeue", fmt.Sprint(p1)}, flags...)...)
	if err != nil || !strings.Contains(out, "requeued") || paid() != 1 {
		t.Fatalf("requeue: %v, paid %d\n%s", err, paid(), out)
	}
	out, err = runOps(t, append([]string{"dead-letters", "requeue", fmt.Sprint(p1), "--json"}, flags...)...)
	var rq struct{ Status string }
	if err != nil || json.Unmarshal([]byte(out), &rq) != nil || rq.Status != "already_resolved" || paid() != 1 {
		t.Fatalf("second requeue: %v, paid %d\n%s", err, paid(), out)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'p1'`); n != 1 {
		t.Fatalf("inbox rows of p1 = %d", n)
	}

	out, err = runOps(t, append([]string{"dead-letters", "discard", fmt.Sprint(p2), "--reason", "duplicate test data"}, flags...)...)
	if err != nil || !strings.Contains(out, "discarded") {
		t.Fatalf("discard: %v\n%s", err, out)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL`); n != 0 {
		t.Fatalf("unresolved dead letters = %d", n)
	}

	if err := store.ConflictInsert(ctx, db.Pool, store.Conflict{DetectedBy: "orders", Source: "demo", EventID: "c1", EventType: orders.Created, RejectedBody: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	out, err = runOps(t, append([]string{"conflicts", "resolve", "1", "--resolution", "kept the original"}, flags...)...)
	if err != nil || !strings.Contains(out, "resolved") {
		t.Fatalf("conflicts resolve: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"conflicts", "resolve", "1"}, flags...)...)
	if err != nil || !strings.Contains(out, "already_resolved") || db.Count(t, `SELECT count(*) FROM hookbridge.conflicts WHERE resolution = 'kept the original'`) != 1 {
		t.Fatalf("second conflicts resolve: %v\n%s", err, out)
	}

	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(ctx, tx, publisher.Message{ID: "dead-1", Subject: "events.orders.x", Payload: []byte("{}")})
	})
	if err != nil {
		t.Fatal(err)
	}
	var deadID int64
	if err := db.Pool.QueryRow(ctx, `UPDATE hookbridge.outbox SET status = 'dead', attempts = 10 WHERE event_id = 'dead-1' RETURNING id`).Scan(&deadID); err != nil {
		t.Fatal(err)
	}
	out, err = runOps(t, append([]string{"outbox", "list", "--dead"}, flags...)...)
	if err != nil || !strings.Contains(out, "dead-1") {
		t.Fatalf("outbox list --dead: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"outbox", "requeue", fmt.Sprint(deadID)}, flags...)...)
	if err != nil || !strings.Contains(out, "requeued") || db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'dead'`) != 0 {
		t.Fatalf("outbox requeue: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"outbox", "requeue", fmt.Sprint(deadID)}, flags...)...)
	if err != nil || !strings.Contains(out, "not_dead") {
		t.Fatalf("second outbox requeue: %v\n%s", err, out)
	}
}

// replay --json streams one object per line, the summary last.
func TestReplayJSONLines(t *testing.T) {
	t.Parallel()
	_, ns, flags := opsEnv(t)
	for i := range 5 {
		ns.PublishHook(t, "demo", fmt.Sprintf("c%d", i), orders.Created, orders.WebhookBody(orders.Created, fmt.Sprintf("o%d", i), 100))
	}
	out, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--dry-run", "--json"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 5 items and a summary:\n%s", len(lines), out)
	}
	for i, l := range lines[:5] {
		var it ops.ReplayItem
		if err := json.Unmarshal([]byte(l), &it); err != nil || it.EventID != fmt.Sprintf("c%d", i) || it.Outcome != consumer.ReplayNew ||
			it.EventType != orders.Created || it.StreamSeq != uint64(i+1) {
			t.Fatalf("line %d = %s (%v)", i, l, err)
		}
	}
	var sum struct {
		Summary ops.ReplayResult `json:"summary"`
	}
	if err := json.Unmarshal([]byte(lines[5]), &sum); err != nil || sum.Summary.Selected != 5 || sum.Summary.New != 5 || sum.Summary.ByType[orders.Created] != 5 {
		t.Fatalf("summary line = %s (%v)", lines[5], err)
	}
}

func TestVersionAndHealthcheck(t *testing.T) {
	t.Parallel()
	out, err := runOps(t, "version")
	if err != nil || !strings.HasPrefix(out, "hookbridge ") {
		t.Fatalf("version: %v %q", err, out)
	}
	var v struct {
		Version string `json:"version"`
		Go      string `json:"go"`
	}
	out, err = runOps(t, "version", "--json")
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Fatalf("version --json: %v %q", err, out)
	}

	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"ready":false,"checks":{"nats":"ok","postgres":"unavailable"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"ready":true}`))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if _, err := runOps(t, "healthcheck", "--http-addr", host); err != nil {
		t.Fatalf("healthcheck of a ready server: %v", err)
	}
	ready.Store(false)
	if _, err := runOps(t, "healthcheck", "--http-addr", host); err == nil || !strings.Contains(err.Error(), "postgres") {
		t.Fatalf("healthcheck of an unready server: %v", err)
	}
	if _, err := runOps(t, "healthcheck", "--http-addr", "127.0.0.1:1", "--timeout", "1s"); err == nil {
		t.Fatal("healthcheck of nothing succeeded")
	}
	if got := loopbackFor("0.0.0.0:8080"); got != "127.0.0.1:8080" {
		t.Fatalf("loopbackFor = %q", got)
	}
}

// Each command's help lists only the global flags it uses; the others are
// accepted (so one set of settings can be passed to every command) but
// hidden.
func TestGlobalFlagsShownOnlyWhereUsed(t *testing.T) {
	t.Parallel()
	help := func(args ...string) string {
		var cli cliCommands
		var buf bytes.Buffer
		parser, err := kong.New(&cli, kong.Name("hookbridge"), kong.Writers(&buf, &buf), kong.Exit(func(int) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = parser.Parse(append(args, "--help")) // help exits through the no-op
		return buf.String()
	}
	for _, c := range []struct {
		args       []string
		shown, not []string
	}{
		{[]string{"serve"}, []string{"--config", "--http-addr", "--database-url", "--nats-url", "--data-dir"}, nil},
		{[]string{"status"}, []string{"--database-url", "--nats-url", "--data-dir", "--embedded"}, nil},
		{[]string{"replay"}, []string{"--database-url", "--nats-url"}, nil},
		{[]string{"dead-letters", "discard"}, []string{"--database-url", "--config"}, []string{"--nats-url", "--data-dir", "--http-addr"}},
		{[]string{"conflicts", "list"}, []string{"--database-url"}, []string{"--nats-url", "--http-addr"}},
		{[]string{"outbox", "list"}, []string{"--database-url", "--dead"}, []string{"--nats-url"}},
		{[]string{"migrate"}, []string{"--database-url"}, []string{"--nats-url", "--http-addr"}},
		{[]string{"healthcheck"}, []string{"--http-addr"}, []string{"--database-url", "--nats-url"}},
		{[]string{"send"}, []string{"--http-addr"}, []string{"--database-url", "--nats-url"}},
		{[]string{"version"}, nil, []string{"--database-url", "--nats-url", "--http-addr", "--config"}},
	} {
		out := help(c.args...)
		for _, f := range c.shown {
			if !strings.Contains(out, f) {
				t.Errorf("%v --help does not show %s:\n%s", c.args, f, out)
			}
		}
		for _, f := range c.not {
			if strings.Contains(out, f) {
				t.Errorf("%v --help shows %s, which it does not use:\n%s", c.args, f, out)
			}
		}
	}
	// A flag a command ignores is still accepted.
	db := hookbridgetest.Postgres(t)
	if _, err := runOps(t, "conflicts", "list", "--database-url", db.URL, "--nats-url", "nats://127.0.0.1:1", "--data-dir", t.TempDir()); err != nil {
		t.Fatalf("conflicts list with ignored flags: %v", err)
	}
}

// consumers pause and resume act on the JetStream durable, and status
// shows the pause.
func TestConsumersPauseResumeCommands(t *testing.T) {
	t.Parallel()
	_, ns, flags := opsEnv(t)
	if _, err := ns.JS.CreateConsumer(context.Background(), "HOOKS", jetstream.ConsumerConfig{Durable: "orders", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	out, err := runOps(t, append([]string{"consumers", "pause", "orders", "--for", "1h"}, flags...)...)
	if err != nil || !strings.Contains(out, "paused until") {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"status"}, flags...)...)
	if err != nil || !regexpLine(out, `^HOOKS\s+orders \(paused\)\s`) {
		t.Fatalf("status of a paused consumer: %v\n%s", err, out)
	}
	if _, err := runOps(t, append([]string{"consumers", "resume", "orders"}, flags...)...); err != nil {
		t.Fatal(err)
	}
	c, err := ns.JS.Consumer(context.Background(), "HOOKS", "orders")
	if err != nil || c.CachedInfo().Paused {
		t.Fatalf("after resume: %v, paused %v", err, err == nil && c.CachedInfo().Paused)
	}
	if _, err := runOps(t, append([]string{"consumers", "pause", "nobody"}, flags...)...); err == nil || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("pause of an unknown consumer: %v", err)
	}
}
