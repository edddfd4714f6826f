package cli

import (
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// configDir writes hookbridge.yaml (yaml) and migrations/0001_crm.sql in
// a new directory and returns the file's path.
func configDir(t *testing.T, yaml string) string {
	t.Helper()
	dir := hookbridgetest.WriteFiles(t, map[string]string{
		"hookbridge.yaml":         yaml,
		"migrations/0001_crm.sql": "CREATE SCHEMA crm; CREATE TABLE crm.tickets (ticket_id bigint PRIMARY KEY, title text NOT NULL);",
	})
	return filepath.Join(dir, "hookbridge.yaml")
}

const checkConfig = `
sources:
  - name: gh
    scheme: github
    secrets: [gh-inline-secret]
consumers:
  - name: tickets
    sql:
      migrations: ./migrations
      apply:
        ticket.opened: INSERT INTO crm.tickets VALUES ((@body::jsonb ->> 'id')::bigint, @body::jsonb ->> 'title')
`

// config check prepares the statements against the schema the pending
// migrations would make, changes nothing, and prints the effective
// configuration with its secrets masked.
func TestConfigCheckPassesAndChangesNothing(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	url := strings.Replace(db.URL, "postgres@", "postgres:db-password@", 1) // trust auth ignores it
	out, err := runOps(t, "config", "check", "--config", configDir(t, checkConfig), "--database-url", url)
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	for _, want := range []string{"name: tickets", "ticket.opened:", "migrations: ./migrations", "- '***'", "postgres:***@",
		"# configuration ok: the statements of 1 SQL consumer(s) prepare"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"gh-inline-secret", "db-password"} {
		if strings.Contains(out, secret) {
			t.Errorf("output holds the secret %q:\n%s", secret, out)
		}
	}
	if n := db.Count(t, "SELECT count(*) FROM pg_namespace WHERE nspname = 'crm'"); n != 0 {
		t.Fatal("config check left the consumer's migrations applied")
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.schema_migrations WHERE set_name = 'tickets'"); n != 0 {
		t.Fatal("config check recorded migrations")
	}
}

func TestConfigCheckNamesABadStatement(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	cfg := strings.Replace(checkConfig, "crm.tickets VALUES", "crm.ticket VALUES", 1)
	out, err := runOps(t, "config", "check", "--config", configDir(t, cfg), "--database-url", db.URL)
	want := `consumer tickets, event type ticket.opened, statement 1: ERROR: relation "crm.ticket" does not exist (SQLSTATE 42P01)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("config check: %v, want %q", err, want)
	}
	if !strings.Contains(out, "name: tickets") || strings.Contains(out, "configuration ok") {
		t.Fatalf("output:\n%s", out)
	}
}

// migrate applies an SQL consumer's migrations and replay applies its
// events with its statements, as serve would.
func TestMigrateAndReplaySQLConsumer(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	flags := []string{"--config", configDir(t, checkConfig), "--database-url", db.URL, "--nats-url", ns.URL()}
	if out, err := runOps(t, append([]string{"migrate"}, flags...)...); err != nil || !strings.Contains(out, "applied 1 migration(s)") {
		t.Fatalf("migrate: %q, %v", out, err)
	}
	ns.PublishHook(t, "gh", "e1", "ticket.opened", []byte(`{"id":7,"title":"crash"}`))
	for range 2 { // the second replay finds a duplicate and runs nothing
		if out, err := runOps(t, append([]string{"replay", "--consumer", "tickets", "--event-id", "e1"}, flags...)...); err != nil {
			t.Fatalf("replay: %v\n%s", err, out)
		}
	}
	if n := db.Count(t, "SELECT count(*) FROM crm.tickets WHERE ticket_id = 7 AND title = 'crash'"); n != 1 {
		t.Fatalf("tickets = %d, want 1", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'tickets'"); n != 1 {
		t.Fatalf("inbox rows = %d, want 1", n)
	}
}

// config check prints the values serve runs with, not the zeros of the
// keys the file leaves out: each one as the package that applies it
// defines its default.
func TestConfigCheckPrintsTheDefaultsInUse(t *testing.T) {
	t.Parallel()
	out, err := runOps(t, "config", "check")
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	var cfg struct {
		HTTPAddr       string        `yaml:"http_addr"`
		DataDir        string        `yaml:"data_dir"`
		MaxInFlight    int           `yaml:"max_in_flight"`
		InboxRetention time.Duration `yaml:"inbox_retention"`
		Relay          struct {
			BatchSize    int           `yaml:"batch_size"`
			PollInterval time.Duration `yaml:"poll_interval"`
			MaxAttempts  int           `yaml:"max_attempts"`
			Retention    time.Duration `yaml:"retention"`
		} `yaml:"relay"`
		Streams struct {
			Replicas        int           `yaml:"replicas"`
			DuplicateWindow time.Duration `yaml:"duplicate_window"`
			MaxAge          time.Duration `yaml:"max_age"`
			Partitions      int           `yaml:"partitions"`
		} `yaml:"streams"`
		Sources []struct {
			Tolerance time.Duration `yaml:"tolerance"`
		} `yaml:"sources"`
		Consumers []struct {
			Concurrency int             `yaml:"concurrency"`
			BatchSize   int             `yaml:"batch_size"`
			AckWait     time.Duration   `yaml:"ack_wait"`
			MaxDeliver  int             `yaml:"max_deliver"`
			Backoff     []time.Duration `yaml:"backoff"`
		} `yaml:"consumers"`
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, out)
	}
	if len(cfg.Sources) != 1 || len(cfg.Consumers) != 1 {
		t.Fatalf("want the demo source and the orders consumer:\n%s", out)
	}
	c := cfg.Consumers[0]
	for _, f := range []struct {
		key       string
		got, want any
	}{
		{"http_addr", cfg.HTTPAddr, app.DefaultHTTPAddr},
		{"data_dir", cfg.DataDir, app.DefaultDataDir},
		{"max_in_flight", cfg.MaxInFlight, bridge.DefaultMaxInFlight},
		{"relay.batch_size", cfg.Relay.BatchSize, relay.DefaultBatchSize},
		{"relay.poll_interval", cfg.Relay.PollInterval, relay.DefaultPollInterval},
		{"relay.max_attempts", cfg.Relay.MaxAttempts, relay.DefaultMaxAttempts},
		{"relay.retention", cfg.Relay.Retention, relay.DefaultRetention},
		{"inbox_retention", cfg.InboxRetention, app.DefaultInboxRetention},
		{"streams.replicas", cfg.Streams.Replicas, 1},
		{"streams.duplicate_window", cfg.Streams.DuplicateWindow, stream.DefaultDuplicateWindow},
		{"streams.max_age", cfg.Streams.MaxAge, stream.DefaultHooksMaxAge},
		{"streams.partitions", cfg.Streams.Partitions, stream.DefaultPartitions},
		{"sources[0].tolerance", cfg.Sources[0].Tolerance, verify.DefaultTolerance},
		{"consumers[0].concurrency", c.Concurrency, engine.DefaultConcurrency},
		{"consumers[0].batch_size", c.BatchSize, engine.DefaultBatchSize},
		{"consumers[0].ack_wait", c.AckWait, engine.DefaultAckWait},
		{"consumers[0].max_deliver", c.MaxDeliver, engine.DefaultMaxDeliver},
		{"consumers[0].backoff entries", len(c.Backoff) > 0, true},
	} {
		if f.got != f.want {
			t.Errorf("%s: %v, want %v\n", f.key, f.got, f.want)
		}
	}
	// max_bytes 0 is half the store for HOOKS, not "no limit".
	if m := regexp.MustCompile(`(?m)^\s+max_bytes: 0 # (.*)$`).FindStringSubmatch(out); m == nil || !strings.Contains(m[1], "of the JetStream store") {
		t.Errorf("streams.max_bytes is not explained as the share of the store serve uses:\n%s", out)
	}
	// No other zero slips through: the zeros left are values in use.
	for _, line := range strings.Split(out, "\n") {
		if regexp.MustCompile(`:\s+(0|0s)$`).MatchString(line) && !strings.Contains(line, "batch_wait:") {
			t.Errorf("zero printed: %q\n%s", line, out)
		}
	}
	// A scheme that signs no timestamp has no tolerance to print.
	out, err = runOps(t, "config", "check", "--config", configDir(t, "sources: [{name: gh, scheme: github, secrets: [s]}]\n"))
	if err != nil || !regexpLine(out, `^\s+tolerance: 0s # the scheme signs no timestamp$`) || strings.Contains(out, "hmac:") ||
		!regexpLine(out, `^\s+ordering_key: none$`) {
		t.Fatalf("config check of a github source: %v\n%s", err, out)
	}
}

// The flags' help states the defaults the configuration fills in.
func TestFlagHelpStatesTheDefaults(t *testing.T) {
	t.Parallel()
	for _, f := range []struct {
		flags any
		field string
		want  string
	}{
		{HTTPAddrFlag{}, "HTTPAddr", "default " + app.DefaultHTTPAddr + ")"},
		{NATSFlags{}, "DataDir", "default " + app.DefaultDataDir + ")"},
	} {
		sf, ok := reflect.TypeOf(f.flags).FieldByName(f.field)
		if help := sf.Tag.Get("help"); !ok || !strings.Contains(help, f.want) {
			t.Errorf("%s help %q does not say %q", f.field, help, f.want)
		}
	}
}
