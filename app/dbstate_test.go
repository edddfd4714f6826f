package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A database that does not exist is said at once, at error level, naming
// it, and /readyz names it too; serve keeps retrying (the ingress keeps
// accepting), and once the database is created it migrates and is ready.
func TestMissingDatabaseIsSaidAtOnce(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.EmptyPostgres(t) // a name of the test's own, dropped at its end
	db.Pool.Close()
	admin := func(sql string) {
		t.Helper()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, hookbridgetest.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ident := pgx.Identifier{db.Name}.Sanitize()
	admin("DROP DATABASE " + ident + " WITH (FORCE)")

	cfg := testConfig(t, ordersHandlers(), func(c *Config) { c.DatabaseURL = db.URL })
	var logs hookbridgetest.LogBuffer
	srv, err := NewServer(cfg, ordersHandlers(), nil, NewLogger(Config{LogFormat: "json", LogLevel: "info"}, &logs))
	if err != nil {
		t.Fatal(err)
	}
	rs := startPrepared(t, srv)
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + rs.addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	hookbridgetest.Eventually(t, time.Minute, "the missing database logged", func() bool {
		return len(logs.Lines("postgres database does not exist")) > 0
	})
	// At once: on the first attempt, not after warnings.
	if warned := logs.Lines("postgres not ready"); len(warned) > 0 {
		t.Errorf("a missing database was first logged as not ready:\n%s", logs.String())
	}
	var line struct {
		Level    string `json:"level"`
		Database string `json:"database"`
	}
	if err := json.Unmarshal([]byte(logs.Lines("postgres database does not exist")[0]), &line); err != nil || line.Level != slog.LevelError.String() || line.Database != db.Name {
		t.Fatalf("log line %+v (%v), want error level naming %s", line, err, db.Name)
	}
	code, body := readyz()
	var answer struct {
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil || code != http.StatusServiceUnavailable ||
		!strings.Contains(answer.Checks["postgres"], `database "`+db.Name+`" does not exist`) {
		t.Fatalf("/readyz: %d %s", code, body)
	}

	admin("CREATE DATABASE " + ident)
	hookbridgetest.Eventually(t, 2*time.Minute, "ready once the database exists", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})
}
