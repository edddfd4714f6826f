package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// exampleSecret is the inline secret of examples/sql-consumer.
const exampleSecret = "whsec_ZXhhbXBsZS1zcWwtY29uc3VtZXItc2VjcmV0"

// writeConfig writes yaml as hookbridge.yaml in a new directory, with
// migrations/0001_crm.sql next to it, and returns the file's path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	dir := hookbridgetest.WriteFiles(t, map[string]string{
		"hookbridge.yaml":         yaml,
		"migrations/0001_crm.sql": "CREATE SCHEMA crm; CREATE TABLE crm.tickets (ticket_id bigint PRIMARY KEY, title text NOT NULL);",
	})
	return filepath.Join(dir, "hookbridge.yaml")
}

const sqlSource = "sources:\n  - name: gh\n    scheme: github\n    secrets: [s]\n"

func TestSQLConsumerConfigValidates(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, sqlSource+`
consumers:
  - name: tickets
    sql:
      migrations: ./migrations
      apply:
        ticket.opened: INSERT INTO crm.tickets VALUES ((@body::jsonb ->> 'id')::bigint, @body::jsonb ->> 'title')
        ticket.closed:
          - SELECT 1
          - SELECT 2
  - name: orders
    handler: orders
    sources: [gh]
`)
	cfg, err := Load(path, mapEnv(nil), Overrides{}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.Consumer("tickets")
	if got := fmt.Sprint(cc.Types(ordersHandlers())); got != "[ticket.closed ticket.opened]" {
		t.Fatalf("types without event_types = %s, want the apply keys", got)
	}
	if got := len(cc.SQL.Apply["ticket.closed"]); got != 2 {
		t.Fatalf("list of statements read as %d", got)
	}
	sets := MigrationSets(cfg, ordersHandlers())
	if len(sets) != 3 || sets[1].Name != "demo" || sets[2].Name != "tickets" {
		t.Fatalf("migration sets %v: want hookbridge, demo, then tickets", sets)
	}
	if migs, err := sets[2].Load(); err != nil || len(migs) != 1 {
		t.Fatalf("tickets migrations, relative to the file: %v, %v", migs, err)
	}
}

func TestSQLConsumerConfigRefuses(t *testing.T) {
	t.Parallel()
	for want, consumers := range map[string]string{
		"consumers[0]: names both handler and sql": `
  - name: t
    handler: orders
    sql: {apply: {ticket.opened: SELECT 1}}`,
		`consumers[0].sql.apply: "*" alone needs event_types`: `
  - name: t
    sql: {apply: {"*": SELECT 1}}`,
		`consumers[0].sql.apply: event type "ticket.closed" has no statements`: `
  - name: t
    event_types: [ticket.opened, ticket.closed]
    sql: {apply: {ticket.opened: SELECT 1}}`,
		`consumers[0].sql.apply: "ticket.opend" is not in event_types`: `
  - name: t
    event_types: [ticket.opened]
    sql: {apply: {ticket.opened: SELECT 1, ticket.opend: SELECT 2}}`,
		`consumers[0].sql.apply: apply "ticket.opened", statement 1: unknown argument @title`: `
  - name: t
    sql: {apply: {ticket.opened: SELECT @title}}`,
		`line 9: this statement is cut at "#>> '{a}'": YAML ends an unquoted value at " #"`: `
  - name: t
    sql:
      apply:
        ticket.opened: SELECT @body::jsonb #>> '{a}'`,
		`line 11: this statement is cut`: `
  - name: t
    sql:
      apply:
        ticket.opened:
          - SELECT 1
          - SELECT @body::jsonb #>> '{a}'`,
		`consumers[0].sql.migrations: `: `
  - name: t
    sql: {migrations: ./nowhere, apply: {ticket.opened: SELECT 1}}`,
		`consumers[0].sql.migrations: a consumer named "hookbridge" cannot have migrations`: `
  - name: hookbridge
    sql: {migrations: ./migrations, apply: {ticket.opened: SELECT 1}}`,
		`consumers[0].sql.migrations: the set name "demo" is taken by handler orders's migrations`: `
  - name: demo
    sql: {migrations: ./migrations, apply: {ticket.opened: SELECT 1}}
  - name: orders
    handler: orders`,
	} {
		_, err := Load(writeConfig(t, sqlSource+"consumers:"+consumers+"\n"), mapEnv(nil), Overrides{}, ordersHandlers())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s\nerr = %v\nwant %q", consumers, err, want)
		}
	}
}

// The example's configuration and migration serve as the README says: a
// ticket.opened becomes a row, a ticket.closed updates it and emits an
// outbox event that the relay publishes to EVENTS with its stable id; a
// repeat of an event runs no statement; the orders consumer, a Go handler,
// runs in the same file.
func TestServeSQLConsumerExample(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	cfg, err := Load("../examples/sql-consumer/hookbridge.yaml", mapEnv(nil),
		Overrides{HTTPAddr: "127.0.0.1:0", DatabaseURL: db.URL, DataDir: t.TempDir()}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Consumers = append(cfg.Consumers, ConsumerConfig{Name: "orders", Handler: "orders", Sources: []string{"shop"}})
	if err := cfg.Validate(mapEnv(nil), ordersHandlers()); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, cfg, ordersHandlers())
	hookbridgetest.Eventually(t, time.Minute, "ready", func() bool {
		return getStatus(t, "http://"+srv.addr+"/readyz") == http.StatusOK
	})
	send := func(id, typ string, data any) []byte {
		t.Helper()
		d, _ := json.Marshal(data)
		body, _ := json.Marshal(map[string]any{"type": typ, "timestamp": time.Now().UTC().Format(time.RFC3339), "data": json.RawMessage(d)})
		req := hookbridgetest.SignedRequest(t, "http://"+srv.addr+"/webhooks/shop", hookbridgetest.Delivery{Secret: exampleSecret, ID: id, Body: body})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: status %d", id, resp.StatusCode)
		}
		return body
	}
	send("evt-1", "ticket.opened", map[string]any{"ticket_id": 42, "title": "Printer on fire"})
	commented := send("evt-2", "ticket.commented", map[string]any{"ticket_id": 42, "text": "still burning"})
	send("evt-3", "ticket.closed", map[string]any{"ticket_id": 42})
	send("evt-4", orders.Created, map[string]any{"order_id": "o-1", "amount_cents": 5, "currency": "EUR"})
	hookbridgetest.Eventually(t, time.Minute, "the ticket_closed event relayed", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.outbox WHERE event_id = 'tickets:shop:evt-3' AND status = 'sent'") == 1
	})
	hookbridgetest.Eventually(t, time.Minute, "the order applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM demo.orders") == 1
	})
	if n := db.Count(t, "SELECT count(*) FROM crm.tickets WHERE ticket_id = 42 AND state = 'closed' AND opened_event = 'evt-1'"); n != 1 {
		t.Fatalf("closed ticket rows = %d, want 1", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM crm.ticket_log WHERE event_type = 'ticket.commented'"); n != 1 {
		t.Fatalf("log rows = %d, want 1 (the \"*\" rule)", n)
	}

	// The relayed message carries the stable id the statement built.
	s, err := srv.js.Stream(context.Background(), stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(context.Background(), "events.crm.ticket_closed")
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(stream.HeaderMsgID); got != "tickets:shop:evt-3" || string(msg.Data) != `{"ticket_id": 42}` {
		t.Fatalf("relayed id %q data %s", got, msg.Data)
	}

	// A repeat and a conflict after the duplicate window (inside it the
	// ingress answers them itself) reach the consumer and run nothing:
	// the "*" statement would fail on its primary key if it ran again.
	last := republish(t, srv, "evt-2", "ticket.commented", commented)
	last = max(last, republish(t, srv, "evt-2", "ticket.commented", []byte(`{"type":"ticket.commented","data":{"other":"body"}}`)))
	hookbridgetest.Eventually(t, time.Minute, "the repeats acked", func() bool {
		c, err := srv.js.Consumer(context.Background(), stream.Hooks, "tickets")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(context.Background())
		return err == nil && info.AckFloor.Stream >= last && info.NumAckPending == 0
	})
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.conflicts WHERE detected_by = 'tickets' AND event_id = 'evt-2'"); n != 1 {
		t.Fatalf("conflicts = %d, want 1", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM crm.ticket_log"); n != 1 {
		t.Fatalf("log rows after a repeat and a conflict = %d, want 1", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters"); n != 0 {
		t.Fatalf("dead letters = %d: a repeat ran the statements", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.outbox"); n != 2 {
		t.Fatalf("outbox rows = %d, want 2 (the ticket and the order)", n)
	}
	// The order's event is relayed in its own time.
	hookbridgetest.Eventually(t, time.Minute, "the order's event relayed", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'") == 2
	})
	if info := streamInfo(t, srv.js, stream.Events); info.State.Msgs != 2 {
		t.Fatalf("EVENTS holds %d messages, want 2", info.State.Msgs)
	}
}

// republish stores body in HOOKS as the ingress would after its duplicate
// window has passed (a Nats-Msg-Id JetStream has not seen) and returns its
// sequence.
func republish(t *testing.T, srv *runningServer, id, typ string, body []byte) uint64 {
	t.Helper()
	msg := nats.NewMsg(stream.HookSubject("shop", typ))
	msg.Data = body
	msg.Header.Set(stream.HeaderSource, "shop")
	msg.Header.Set(stream.HeaderEventID, id)
	msg.Header.Set(stream.HeaderEventType, typ)
	msg.Header.Set(stream.HeaderReceivedAt, time.Now().UTC().Format(time.RFC3339Nano))
	ack, err := srv.js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(fmt.Sprintf("later:%s:%d", id, time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// A statement that does not prepare refuses the start, naming the
// consumer, the event type and Postgres's message.
func TestServeRefusesABadStatement(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	path := writeConfig(t, sqlSource+`
consumers:
  - name: tickets
    sql:
      migrations: ./migrations
      apply:
        ticket.opened: INSERT INTO crm.tickets (ticket_id, title) VALUES (@event_id::bigint, @body)
        ticket.closed: UPDATE crm.tickets SET state = 'closed'
`)
	cfg, err := Load(path, mapEnv(nil), Overrides{HTTPAddr: "127.0.0.1:0", DatabaseURL: db.URL, DataDir: t.TempDir()}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, ordersHandlers(), nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = srv.Run(ctx, nil)
	want := `consumer tickets, event type ticket.closed, statement 1: ERROR: column "state" of relation "tickets" does not exist (SQLSTATE 42703)`
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), want) {
		t.Fatalf("serve returned %v, want a refusal containing %q", err, want)
	}
	// Migrated (the check runs after the migrations), nothing consumed.
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.schema_migrations WHERE set_name = 'tickets'"); n != 1 {
		t.Fatalf("tickets migrations applied = %d, want 1", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 0 {
		t.Fatalf("inbox rows = %d", n)
	}
}

func TestEffectiveYAMLMasksSecrets(t *testing.T) {
	t.Parallel()
	cfg := Config{
		DatabaseURL: "postgres://app:pg-pass@db:5432/app?sslmode=disable",
		NATSURL:     "nats://user:nats-pass@nats:4222",
		Sources: []SourceConfig{{Name: "gh", Scheme: "github", Secrets: stringList{"gh-secret-1", "gh-secret-2"}, SecretEnv: stringList{"GH_SECRET"},
			secretsRead: []string{"gh-secret-1", "gh-secret-2", "from-env"}}},
		Tracing: TracingConfig{OTLPEndpoint: "https://u:otel-pass@collector:4318"},
	}
	out, err := EffectiveYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"pg-pass", "nats-pass", "gh-secret", "from-env", "otel-pass"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("output holds %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"postgres://app:***@db:5432/app?sslmode=disable", "nats://user:***@nats:4222", "- GH_SECRET", "https://u:***@collector:4318"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(string(out), "'***'") != 2 {
		t.Errorf("want both inline secrets masked:\n%s", out)
	}
	if cfg.Sources[0].Secrets[0] != "gh-secret-1" {
		t.Error("EffectiveYAML changed its argument")
	}
	for in, want := range map[string]string{
		"host=db user=app password=s3cret dbname=app": "host=db user=app password=*** dbname=app",
		"host=db password='a b' dbname=app":           "host=db password=*** dbname=app",
		"postgres://db/app?password=s3cret&x=1":       "postgres://db/app?password=***&x=1",
		"postgres://db/app":                           "postgres://db/app",
	} {
		if got := maskURL(in); got != want {
			t.Errorf("maskURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// The configuration docs/CONSUMERS.md shows loads and its statements
// prepare against its tables: the documented contract runs as written.
func TestConsumersDocExampleRuns(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/CONSUMERS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no yaml block in docs/CONSUMERS.md")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "migrations", "tickets"), 0o755); err != nil {
		t.Fatal(err)
	}
	mig := `CREATE SCHEMA crm; CREATE TABLE crm.tickets (issue_id bigint PRIMARY KEY, title text NOT NULL, state text NOT NULL, opened_event text NOT NULL);`
	if err := os.WriteFile(filepath.Join(dir, "migrations", "tickets", "0001_tickets.sql"), []byte(mig), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "hookbridge.yaml")
	if err := os.WriteFile(path, []byte(sqlSource+block), 0o644); err != nil {
		t.Fatal(err)
	}
	db := hookbridgetest.Postgres(t)
	cfg, err := Load(path, mapEnv(nil), Overrides{DatabaseURL: db.URL}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(cfg.Consumer("tickets").SQL.Apply["issues.closed"]); got != 2 {
		t.Fatalf("issues.closed has %d statements, want 2", got)
	}
	if err := CheckSQLConsumers(context.Background(), db.Pool, cfg, ordersHandlers()); err != nil {
		t.Fatal(err)
	}
}

// An SQL consumer applies one batch at a time unless told otherwise or
// every source it reads has an ordering key: a statement cannot ask for
// an early event to be retried, so without keys stream order is the safe
// default, and with keys order is kept per key at any concurrency. A Go
// handler keeps engine.DefaultConcurrency.
func TestSQLConsumerConcurrencyDefaults(t *testing.T) {
	t.Parallel()
	cfg := Config{Sources: []SourceConfig{
		{Name: "plain", Scheme: "github"},
		{Name: "keyed", Scheme: "github", OrderingKey: &KeyConfig{Pointer: "/id"}},
	}}
	for _, c := range []struct {
		name string
		cc   ConsumerConfig
		want int
	}{
		{"sql, unkeyed source", ConsumerConfig{SQL: &SQLConsumerConfig{}, Sources: []string{"plain"}}, 1},
		{"sql, all sources (one unkeyed)", ConsumerConfig{SQL: &SQLConsumerConfig{}}, 1},
		{"sql, keyed source", ConsumerConfig{SQL: &SQLConsumerConfig{}, Sources: []string{"keyed"}}, engine.DefaultConcurrency},
		{"go handler", ConsumerConfig{Handler: "orders", Sources: []string{"plain"}}, engine.DefaultConcurrency},
		{"configured", ConsumerConfig{SQL: &SQLConsumerConfig{}, Concurrency: 3}, 3},
	} {
		if got := cfg.Concurrency(&c.cc); got != c.want {
			t.Errorf("%s: concurrency = %d, want %d", c.name, got, c.want)
		}
	}
}
