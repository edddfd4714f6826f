package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/hookbridgetest"
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
