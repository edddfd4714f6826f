package app

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// docLogLine is one row of docs/DEPLOYMENT.md's table of the lines written
// at the default level: the messages it names (… stands for any text) and
// the levels they are written at.
type docLogLine struct {
	messages []*regexp.Regexp
	levels   []string
	row      string
}

// deploymentLogTable reads the table under "## Logs" in DEPLOYMENT.md.
func deploymentLogTable(t *testing.T) []docLogLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "DEPLOYMENT.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Logs\n")
	if !ok {
		t.Fatal("docs/DEPLOYMENT.md has no \"## Logs\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	code := regexp.MustCompile("`([^`]+)`")
	var out []docLogLine
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		d := docLogLine{row: line}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			parts := strings.Split(m[1], "…")
			for i := range parts {
				parts[i] = regexp.QuoteMeta(parts[i])
			}
			d.messages = append(d.messages, regexp.MustCompile("^"+strings.Join(parts, ".*")+"$"))
		}
		for _, l := range strings.Split(cells[2], ",") {
			d.levels = append(d.levels, strings.ToUpper(strings.TrimSpace(l)))
		}
		out = append(out, d)
	}
	if len(out) < 10 {
		t.Fatalf("the Logs section's table has %d rows; the test reads | `message` | level | when |", len(out))
	}
	return out
}

// levelsOf is the levels the table gives msg, nil when no row names it.
func levelsOf(table []docLogLine, msg string) []string {
	for _, d := range table {
		for _, re := range d.messages {
			if re.MatchString(msg) {
				return d.levels
			}
		}
	}
	return nil
}

// The Logs section of docs/DEPLOYMENT.md says which lines serve writes at
// the default level. Serve runs at that level through an accepted
// delivery, its repeat, a conflicting one, a refused one and an event
// that fails until the order it pays exists: every line it writes must
// be in the table at its level, and what goes well writes none.
func TestDeploymentDocNamesTheDefaultLogLines(t *testing.T) {
	t.Parallel()
	table := deploymentLogTable(t)
	db := hookbridgetest.Postgres(t, orders.Migrations())
	cfg := testConfig(t, ordersHandlers(), func(c *Config) { c.DatabaseURL = db.URL })
	var logs hookbridgetest.LogBuffer
	srv, err := NewServer(cfg, ordersHandlers(), nil, NewLogger(Config{LogFormat: "json", LogLevel: "info"}, &logs))
	if err != nil {
		t.Fatal(err)
	}
	rs := startPrepared(t, srv)
	hookbridgetest.Eventually(t, time.Minute, "serve ready", func() bool { return statusOf(t, "http://"+rs.addr+"/readyz", nil) == http.StatusOK })

	post := func(id string, body []byte, secret string) int {
		req := hookbridgetest.SignedRequest(t, "http://"+rs.addr+"/webhooks/demo", hookbridgetest.Delivery{Secret: secret, ID: id, Body: body})
		return statusOf(t, "", req)
	}
	// Paid before its order exists: the demo handler postpones it (a
	// debug line) until the order is restored.
	if got := post("evt-paid-early", orders.WebhookBody(orders.Paid, "o-9", 100), testSecret); got != http.StatusAccepted {
		t.Fatalf("evt-paid-early: status %d", got)
	}
	hookbridgetest.Eventually(t, time.Minute, "a postponement recorded", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures`) == 1
	})
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO demo.orders (order_id, status, amount_cents, currency, created_event_id, last_event_id)
		VALUES ('o-9', 'created', 100, 'EUR', 'restored', 'restored')`); err != nil {
		t.Fatal(err)
	}
	created := orders.WebhookBody(orders.Created, "o-1", 100)
	for _, c := range []struct {
		id     string
		body   []byte
		secret string
		want   int
	}{
		{"evt-1", created, testSecret, http.StatusAccepted},
		{"evt-1", created, testSecret, http.StatusOK},
		{"evt-1", orders.WebhookBody(orders.Created, "o-1", 999), testSecret, http.StatusConflict},
		{"evt-2", created, "whsec_dGhlIHdyb25nIHNlY3JldCwgZm9yIHRoZSB0ZXN0", http.StatusUnauthorized},
	} {
		if got := post(c.id, c.body, c.secret); got != c.want {
			t.Fatalf("%s: status %d, want %d", c.id, got, c.want)
		}
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "both events applied and the conflict recorded", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == 2 && db.Count(t, `SELECT count(*) FROM hookbridge.conflicts`) == 1
	})
	if err := rs.stop(); err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Level  string `json:"level"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		seen[line.Msg] = true
		levels := levelsOf(table, line.Msg)
		switch {
		case levels == nil:
			t.Errorf("%s line %q is not in docs/DEPLOYMENT.md's Logs table:\n%s", line.Level, line.Msg, sc.Text())
		case !slices.Contains(levels, line.Level):
			t.Errorf("line %q is written at %s; docs/DEPLOYMENT.md's Logs table says %v", line.Msg, line.Level, levels)
		}
		if line.Msg == "webhook" && line.Status < 300 {
			t.Errorf("an answered request (%d) wrote a line at the default level: %s", line.Status, sc.Text())
		}
	}
	// The run went through what the table promises for it.
	for _, msg := range []string{"hookbridge started", "webhook", "conflict recorded", "event applied after retrying", "hookbridge stopped"} {
		if !seen[msg] {
			t.Errorf("no %q line; the log:\n%s", msg, logs.String())
		}
	}
}

// statusOf sends req (a GET of url when req is nil) and returns the
// answer's status.
func statusOf(t *testing.T, url string, req *http.Request) int {
	t.Helper()
	if req == nil {
		var err error
		if req, err = http.NewRequest(http.MethodGet, url, nil); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Every message the table names is one the code writes: the table does
// not keep a line after its code changed.
func TestDeploymentDocLogLinesExist(t *testing.T) {
	t.Parallel()
	var src strings.Builder
	for _, dir := range []string{".", "../bridge", "../consumer", "../internal/engine", "../publisher", "../internal/relay"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	literal := regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	var strs []string
	for _, m := range literal.FindAllStringSubmatch(src.String(), -1) {
		strs = append(strs, m[1])
	}
	for _, d := range deploymentLogTable(t) {
		for _, re := range d.messages {
			found := slices.ContainsFunc(strs, re.MatchString)
			// An outage line is written as its part's name + " failing".
			if !found && strings.Contains(re.String(), ".*") {
				found = true
				for _, lit := range regexp.MustCompile(`[^.*^$\\]+`).FindAllString(re.String(), -1) {
					if !strings.Contains(src.String(), strings.TrimSpace(lit)) {
						found = false
					}
				}
			}
			if !found {
				t.Errorf("docs/DEPLOYMENT.md's Logs table names %s, which no code writes (row %q)", re, d.row)
			}
		}
	}
}
