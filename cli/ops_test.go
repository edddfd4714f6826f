package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// runOps runs the hookbridge command line as Main does, with an empty
// environment, and returns what it printed on stdout.
func runOps(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var cli cliCommands
	parser, err := kong.New(&cli, kong.Name("hookbridge"), kong.Exit(func(code int) { t.Fatalf("command line exited with %d", code) }))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	var stdout, stderr bytes.Buffer
	rt := &runtime{handlers: builtin.Handlers(), stdout: &stdout, stderr: &stderr, env: noEnv}
	err = runParsed(context.Background(), kctx, rt)
	return stdout.String(), err
}

// noEnv is an empty environment: the tests pass every setting as a flag.
func noEnv(string) (string, bool) { return "", false }

func opsEnv(t *testing.T) (*hookbridgetest.Database, *hookbridgetest.JetStream, []string) {
	t.Helper()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	return db, ns, []string{"--database-url", db.URL, "--nats-url", ns.URL()}
}

func TestReplayCommandAppliesDeadLetterOnce(t *testing.T) {
	t.Parallel()
	db, ns, flags := opsEnv(t)
	ns.PublishHook(t, "demo", "c1", orders.Created, orders.WebhookBody(orders.Created, "o1", 100))
	paySeq := ns.PublishHook(t, "demo", "p1", orders.Paid, orders.WebhookBody(orders.Paid, "o1", 100))
	if _, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--event-id", "c1"}, flags...)...); err != nil {
		t.Fatalf("replay c1: %v", err)
	}
	err := engine.RecordDeadLetter(context.Background(), db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo",
		EventID: "p1", EventType: orders.Paid, StreamSeq: paySeq, Deliveries: 3, Reason: engine.ReasonMaxDeliver, LastError: "unknown order"})
	if err != nil {
		t.Fatal(err)
	}

	out, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--dead-letters", "--dry-run"}, flags...)...)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if !strings.Contains(out, "p1") || !regexpLine(out, `^new\s+1$`) || regexpLine(out, `^processed`) {
		t.Fatalf("dry run output:\n%s", out)
	}
	if n := db.Count(t, "SELECT count(*) FROM demo.orders WHERE version = 1"); n != 1 {
		t.Fatalf("dry run changed the order")
	}

	for i, wantProcessed := range []int{1, 0} {
		out, err = runOps(t, append([]string{"replay", "--consumer", "orders", "--dead-letters", "--json"}, flags...)...)
		if err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
		// One JSON object per line; the summary is the last.
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var got struct {
			Summary ops.ReplayResult `json:"summary"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
			t.Fatalf("replay json: %v\n%s", err, out)
		}
		if got.Summary.Processed != wantProcessed || got.Summary.Resolved != wantProcessed || got.Summary.Selected != wantProcessed {
			t.Fatalf("replay %d summary = %+v, want %d processed", i, got.Summary, wantProcessed)
		}
	}
	if n := db.Count(t, "SELECT count(*) FROM demo.orders WHERE version = 2 AND status = 'paid'"); n != 1 {
		t.Fatalf("order not paid exactly once")
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL"); n != 0 {
		t.Fatalf("unresolved dead letters = %d", n)
	}
}

func TestReplayCommandRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	db, _, flags := opsEnv(t)
	if _, err := runOps(t, append([]string{"replay", "--consumer", "nope"}, flags...)...); err == nil || !strings.Contains(err.Error(), `"nope" is not configured`) {
		t.Fatalf("unknown consumer: %v", err)
	}
	if _, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--since", "yesterday"}, flags...)...); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Fatalf("bad --since: %v", err)
	}
	_, err := runOps(t, "replay", "--consumer", "orders", "--database-url", db.URL)
	if err == nil || !strings.Contains(err.Error(), "HOOKBRIDGE_NATS_URL") || !strings.Contains(err.Error(), "--embedded") {
		t.Fatalf("no NATS URL: %v", err)
	}
}

func TestStatusCommand(t *testing.T) {
	t.Parallel()
	db, ns, flags := opsEnv(t)
	ctx := context.Background()
	for i := range 3 {
		ns.PublishHook(t, "demo", fmt.Sprintf("c%d", i), orders.Created, orders.WebhookBody(orders.Created, fmt.Sprint(i), 1))
	}
	if _, err := ns.JS.CreateOrUpdateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: "orders", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for i, resolved := range []bool{false, true} {
		d := engine.DeadLetter{Consumer: "orders", Source: "demo", EventID: fmt.Sprint("e", i), StreamSeq: uint64(i + 1),
			Deliveries: 1, Reason: engine.ReasonPermanent, LastError: "x"}
		if err := engine.RecordDeadLetter(ctx, db.Pool, d); err != nil {
			t.Fatal(err)
		}
		if resolved {
			if _, err := db.Pool.Exec(ctx, "UPDATE hookbridge.dead_letters SET resolved_at = now() WHERE event_id = $1", d.EventID); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := engine.RecordConflict(ctx, tx, engine.ConflictRecord{DetectedBy: "orders", Source: "demo", EventID: "c1", RejectedBody: []byte("b")}); err != nil {
			return err
		}
		return publisher.Enqueue(ctx, tx, publisher.Message{ID: "out-1", Subject: "events.orders.created", Payload: []byte("{}")})
	})
	if err != nil {
		t.Fatal(err)
	}

	out, err := runOps(t, append([]string{"status", "--json"}, flags...)...)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	var hooks *ops.StreamStatus
	for i := range st.Streams {
		if st.Streams[i].Name == stream.Hooks {
			hooks = &st.Streams[i]
		}
	}
	if hooks == nil || hooks.Messages != 3 || hooks.FirstSeq != 1 || hooks.LastSeq != 3 || hooks.FirstTime == nil || hooks.LastTime == nil {
		t.Fatalf("HOOKS status = %+v", hooks)
	}
	if hooks.LowestAckFloor == nil || *hooks.LowestAckFloor != 0 || hooks.MaxBytes != stream.FallbackHooksMaxBytes || hooks.Full != "" {
		t.Fatalf("HOOKS limits = %+v", hooks)
	}
	if len(st.Consumers) != 1 || st.Consumers[0].Name != "orders" || st.Consumers[0].Pending != 3 || st.Consumers[0].OldestUnackedAgeSeconds <= 0 {
		t.Fatalf("consumers = %+v", st.Consumers)
	}
	if st.DeadLettersByConsumer["orders"] != 1 || st.DeadLettersUnresolved != 1 || st.Conflicts != 1 || st.Outbox.Pending != 1 || st.Outbox.Dead != 0 ||
		st.Outbox.OldestPendingAgeSeconds <= 0 || st.Ready != nil {
		t.Fatalf("status = %+v", st)
	}

	out, err = runOps(t, append([]string{"status"}, flags...)...)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, re := range []string{`^HOOKS\s+3\s+\d+\s+10737418240 \(0%\)\s+3\s+\S+\s+seq 1, \S+ \(\d+s ago\)\s+72h0m0s$`, `^HOOKS\s+orders\s+3\s+0\s+0\s+0\s+0\s+0\s+\d+s\s+1$`, `^HOOKS: no consumer needs a message up to seq 0 .* reach back to seq 1$`, `^dead letters unresolved\s+1$`, `^conflicts\s+1$`, `^outbox pending\s+1$`} {
		if !regexpLine(out, re) {
			t.Fatalf("status output lacks %s:\n%s", re, out)
		}
	}

	// Without a NATS URL the Postgres part is still printed, then the reason.
	out, err = runOps(t, "status", "--database-url", db.URL)
	if err == nil || !strings.Contains(err.Error(), "HOOKBRIDGE_NATS_URL") || !regexpLine(out, `^outbox pending\s+1$`) || strings.Contains(out, "HOOKS") {
		t.Fatalf("status without NATS: err %v, output:\n%s", err, out)
	}
}

// --embedded opens serve's store while serve is stopped, and refuses while
// a serve answers on the configured address.
func TestStatusEmbeddedStore(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	dataDir := t.TempDir()
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dataDir, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := embedded.Connect(ns)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := stream.EnsureIngress(context.Background(), js, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()

	flags := []string{"--database-url", db.URL, "--data-dir", dataDir, "--http-addr", "127.0.0.1:1"}
	out, err := runOps(t, append([]string{"status", "--embedded"}, flags...)...)
	if err != nil || !regexpLine(out, `^HOOKS\s+0\s`) {
		t.Fatalf("status --embedded: %v\n%s", err, out)
	}

	serve := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})) // answers /healthz as serve does
	defer serve.Close()
	flags[len(flags)-1] = strings.TrimPrefix(serve.URL, "http://")
	_, err = runOps(t, append([]string{"status", "--embedded"}, flags...)...)
	if err == nil || !strings.Contains(err.Error(), "owns the store") {
		t.Fatalf("status --embedded with serve running: %v", err)
	}
}

func TestDeadLettersAndConflictsCommands(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	flags := []string{"--database-url", db.URL}
	body := `{"card":"tok_visible_only_in_show"}`
	err := engine.RecordDeadLetter(ctx, db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo", EventID: "evt-9",
		EventType: orders.Paid, StreamSeq: 42, Deliveries: 10, Reason: engine.ReasonMaxDeliver, LastError: "unknown order", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return engine.RecordConflict(ctx, tx, engine.ConflictRecord{DetectedBy: "ingress", Source: "demo", EventID: "evt-7",
			EventType: orders.Created, OriginalSeq: 3, RejectedBody: []byte(body)})
	})
	if err != nil {
		t.Fatal(err)
	}
	dlID := db.Count(t, "SELECT id FROM hookbridge.dead_letters")
	cID := db.Count(t, "SELECT id FROM hookbridge.conflicts")

	for _, args := range [][]string{{"dead-letters"}, {"dead-letters", "list", "--consumer", "orders"}} {
		out, err := runOps(t, append(slices.Clone(args), flags...)...)
		if err != nil || !regexpLine(out, fmt.Sprintf(`^%d\s+orders\s+42\s+demo\s+evt-9\s+order.paid\s+10\s+max_deliver\s`, dlID)) || strings.Contains(out, "tok_visible") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	out, err := runOps(t, append([]string{"dead-letters", "list", "--consumer", "other"}, flags...)...)
	if err != nil || strings.Contains(out, "evt-9") {
		t.Fatalf("list of another consumer: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"dead-letters", "list", "--json"}, flags...)...)
	var dls ops.Page[ops.DeadLetterView]
	if err != nil || json.Unmarshal([]byte(out), &dls) != nil || len(dls.Items) != 1 || dls.Items[0].ID != int64(dlID) || dls.Items[0].EventID != "evt-9" ||
		dls.NextCursor != nil || strings.Contains(out, "tok_visible") {
		t.Fatalf("dead-letters list --json: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"dead-letters", "list", "--json", "--limit", "1"}, flags...)...)
	if err != nil || json.Unmarshal([]byte(out), &dls) != nil || dls.NextCursor == nil || *dls.NextCursor != fmt.Sprint(dlID) {
		t.Fatalf("a full page has the next cursor: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"dead-letters", "list", "--json", "--cursor", *dls.NextCursor}, flags...)...)
	if err != nil || json.Unmarshal([]byte(out), &dls) != nil || len(dls.Items) != 0 {
		t.Fatalf("the page after the last: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"dead-letters", "show", fmt.Sprint(dlID)}, flags...)...)
	if err != nil || !strings.Contains(out, body) || !regexpLine(out, `^last error\s+unknown order$`) {
		t.Fatalf("show: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"dead-letters", "show", fmt.Sprint(dlID), "--json"}, flags...)...)
	var shown struct {
		EventID string `json:"event_id"`
		Body    string `json:"body"`
	}
	if err != nil || json.Unmarshal([]byte(out), &shown) != nil || shown.Body != body || shown.EventID != "evt-9" {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	if _, err := runOps(t, append([]string{"dead-letters", "show", "999999"}, flags...)...); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("show unknown id: %v", err)
	}

	out, err = runOps(t, append([]string{"conflicts", "list"}, flags...)...)
	if err != nil || !regexpLine(out, fmt.Sprintf(`^%d\s+ingress\s+demo\s+evt-7\s+order.created\s+3\s+-\s`, cID)) || strings.Contains(out, "tok_visible") {
		t.Fatalf("conflicts list: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"conflicts", "list", "--json"}, flags...)...)
	var list ops.Page[ops.ConflictView]
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Items) != 1 || list.Items[0].EventID != "evt-7" || strings.Contains(out, "tok_visible") {
		t.Fatalf("conflicts list --json: %v\n%s", err, out)
	}
	out, err = runOps(t, append([]string{"conflicts", "show", fmt.Sprint(cID)}, flags...)...)
	if err != nil || !strings.Contains(out, body) {
		t.Fatalf("conflicts show: %v\n%s", err, out)
	}
}

// regexpLine reports whether some line of out matches re.
func regexpLine(out, re string) bool {
	return regexp.MustCompile(`(?m)` + re).MatchString(out)
}

// Main answers 0 when the command succeeds and 1 when it fails.
func TestMainExitCodes(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.EmptyPostgres(t)
	if code := Main([]string{"migrate", "--database-url", db.URL}, builtin.Handlers()); code != 0 {
		t.Fatalf("migrate exit code %d, want 0", code)
	}
	if n := db.Count(t, "SELECT count(*) FROM demo.orders"); n != 0 {
		t.Fatalf("demo.orders rows = %d after migrate", n)
	}
	if code := Main([]string{"replay", "--consumer", "nope", "--database-url", db.URL}, builtin.Handlers()); code != 1 {
		t.Fatalf("failing replay exit code %d, want 1", code)
	}
}
