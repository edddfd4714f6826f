package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

// receiver is a delivery endpoint that answers code and counts the
// requests per webhook-id.
type receiver struct {
	code atomic.Int32
	mu   sync.Mutex
	got  map[string]int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.got[req.Header.Get("webhook-id")]++
	r.mu.Unlock()
	w.WriteHeader(int(r.code.Load()))
}

func (r *receiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

func (r *receiver) testEvents() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, c := range r.got {
		if strings.HasPrefix(id, "test_") {
			n += c
		}
	}
	return n
}

// serveWithEndpoint runs serve with one delivery endpoint, partner, on
// events.orders.>, posting to recv with one attempt per delivery (a
// failure is dead-lettered at once), and returns the flags the operator
// commands need to reach it.
func serveWithEndpoint(t *testing.T, recv *receiver, env app.Env) (db *hookbridgetest.Database, srv *app.Server, flags []string) {
	t.Helper()
	hs := httptest.NewServer(recv)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "hookbridge.yaml")
	yaml := fmt.Sprintf(`delivery:
  endpoints:
    - name: partner
      url: %s/hooks
      subjects: [events.orders.>]
      secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
      retry: [0s]
      allow_private: true
`, hs.URL)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	db = hookbridgetest.Postgres(t, orders.Migrations())
	handlers := builtin.Handlers()
	dataDir := filepath.Join(dir, "data")
	cfg, err := app.Load(path, env, app.Overrides{DatabaseURL: db.URL, DataDir: dataDir, HTTPAddr: "127.0.0.1:0"}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	srv, addr := runServer(t, cfg, handlers)
	flags = []string{"--config", path, "--database-url", db.URL, "--data-dir", dataDir, "--http-addr", addr}
	// The durable exists once an instance holds the endpoint's lease (it
	// is created first): an event published from then on reaches it.
	hookbridgetest.Eventually(t, time.Minute, "an instance reads partner", func() bool {
		var owner string
		_ = db.Pool.QueryRow(context.Background(), `SELECT coalesce(owner, '') FROM hookbridge.delivery_endpoints WHERE name = 'partner'`).Scan(&owner)
		return owner != ""
	})
	return db, srv, flags
}

// publishEvent writes one outbox row; the relay publishes it to EVENTS.
func publishEvent(t *testing.T, db *hookbridgetest.Database, id string) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(context.Background(), tx, publisher.Message{ID: id, Subject: "events.orders.created", Payload: []byte(`{"order_id":"1"}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// opsJSON runs an operator command with --json and decodes its output.
func opsJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := runOps(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	reflect.ValueOf(v).Elem().SetZero() // a key the output omits is not the previous call's
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v: decode %s: %v", args, out, err)
	}
}

// The endpoint commands against a running serve and a real receiver: a
// failed delivery is dead-lettered, shown by `endpoints show`, `events
// show` and the dead-letter list; a dry-run requeue changes nothing; a
// requeue delivers it once; disable and enable change the state status
// shows; a test event reaches the receiver; a replay by id sends the
// event again, and its dry run sends nothing.
func TestEndpointsCommands(t *testing.T) {
	t.Parallel()
	recv := &receiver{got: map[string]int{}}
	recv.code.Store(http.StatusInternalServerError)
	const token = "endpoints-token-0123456789"
	db, srv, flags := serveWithEndpoint(t, recv, func(k string) (string, bool) {
		switch k {
		case "HOOKBRIDGE_ADMIN_TOKEN":
			return token, true
		case "HOOKBRIDGE_ADMIN_ADDR":
			return "127.0.0.1:0", true
		}
		return "", false
	})
	with := func(args ...string) []string { return append(args, flags...) }

	publishEvent(t, db, "ord-1-created")
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE endpoint = 'partner' AND resolved_at IS NULL`)
	if n := recv.count("ord-1-created"); n != 1 {
		t.Fatalf("the receiver got %d attempts, want 1 (retry: [0s])", n)
	}

	var view struct {
		State          string
		DeadLetters    int `json:"dead_letters"`
		RecentAttempts []struct {
			EventID    string `json:"event_id"`
			StatusCode int    `json:"status_code"`
		} `json:"recent_attempts"`
		DeadLetterList []struct{ ID int64 } `json:"dead_letter_list"`
	}
	// The attempt rows are written in batches: poll.
	hookbridgetest.Eventually(t, time.Minute, "endpoints show lists the attempt", func() bool {
		opsJSON(t, &view, with("endpoints", "show", "partner")...)
		return len(view.RecentAttempts) == 1
	})
	if view.DeadLetters != 1 || len(view.DeadLetterList) != 1 || view.RecentAttempts[0].StatusCode != 500 ||
		view.RecentAttempts[0].EventID != "ord-1-created" {
		t.Fatalf("endpoints show: %+v", view)
	}
	dl := view.DeadLetterList[0].ID

	// status --json and the admin API's status show the endpoint alike
	// (the dead letter included): compared until a pair is read with
	// nothing moving in between.
	var diffs []string
	hookbridgetest.Eventually(t, time.Minute, "status --json and GET /api/v1/status agree", func() bool {
		start := time.Now()
		out, err := runOps(t, with("status", "--json")...)
		if err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		fromCLI := decodeObject(t, []byte(out))
		code, b := adminCall(t, srv.AdminAddr(), token, http.MethodGet, "/api/v1/status", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/status: %d\n%s", code, b)
		}
		fromAPI := decodeObject(t, b)
		delete(fromAPI, "ready")
		diffs = compareJSON("", fromCLI, fromAPI, time.Since(start).Seconds())
		eps, _ := fromCLI["endpoints"].([]any)
		return len(diffs) == 0 && len(eps) == 1 && eps[0].(map[string]any)["dead_letters"] == float64(1)
	})

	var listed []struct{ ID int64 }
	opsJSON(t, &listed, with("endpoints", "dead-letters", "list", "--endpoint", "partner", "--since", "1h")...)
	if len(listed) != 1 || listed[0].ID != dl {
		t.Fatalf("dead-letters list --since 1h: %+v", listed)
	}
	opsJSON(t, &listed, with("endpoints", "dead-letters", "list", "--until", "1h")...)
	if len(listed) != 0 {
		t.Fatalf("dead-letters list --until 1h: %+v, want none (written just now)", listed)
	}

	out, err := runOps(t, with("events", "show", "ord-1-created")...)
	if err != nil || !strings.Contains(out, "to partner: dead_lettered") || !strings.Contains(out, "5xx") {
		t.Fatalf("events show: %v\n%s", err, out)
	}

	var res struct {
		Matched int
		Done    []int64
		DryRun  bool `json:"dry_run"`
	}
	opsJSON(t, &res, with("endpoints", "dead-letters", "requeue", "--endpoint", "partner", "--dry-run")...)
	if res.Matched != 1 || len(res.Done) != 1 || res.Done[0] != dl || !res.DryRun {
		t.Fatalf("requeue --dry-run: %+v", res)
	}
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE resolved_at IS NULL`)
	if _, err := runOps(t, with("endpoints", "dead-letters", "discard")...); err == nil {
		t.Fatal("a discard naming nothing was accepted")
	}

	recv.code.Store(http.StatusNoContent)
	opsJSON(t, &res, with("endpoints", "dead-letters", "requeue", fmt.Sprint(dl))...)
	if res.Matched != 1 || len(res.Done) != 1 || res.Done[0] != dl || res.DryRun {
		t.Fatalf("requeue: %+v", res)
	}
	hookbridgetest.Eventually(t, time.Minute, "the requeued delivery arrives", func() bool { return recv.count("ord-1-created") == 2 })
	var hist struct {
		Endpoints []struct {
			Endpoint string
			State    string
			Attempts []any
		}
	}
	hookbridgetest.Eventually(t, time.Minute, "events show says delivered", func() bool {
		opsJSON(t, &hist, with("events", "show", "ord-1-created")...)
		return len(hist.Endpoints) == 1 && hist.Endpoints[0].State == "delivered" && len(hist.Endpoints[0].Attempts) == 2
	})

	var change struct {
		State   string
		Changed bool
	}
	opsJSON(t, &change, with("endpoints", "disable", "partner", "--reason", "maintenance")...)
	if change.State != "disabled" || !change.Changed {
		t.Fatalf("disable: %+v", change)
	}
	var st struct {
		Endpoints []struct {
			Name, State    string
			DisabledReason string `json:"disabled_reason"`
		}
	}
	opsJSON(t, &st, with("status")...)
	if len(st.Endpoints) != 1 || st.Endpoints[0].State != "disabled" || st.Endpoints[0].DisabledReason != "maintenance" {
		t.Fatalf("status after disable: %+v", st)
	}
	if out, err := runOps(t, with("status")...); err != nil || !strings.Contains(out, "ENDPOINT") || !strings.Contains(out, "disabled (maintenance)") {
		t.Fatalf("status does not show the disabled endpoint: %v\n%s", err, out)
	}
	if out, err := runOps(t, with("endpoints", "list")...); err != nil || !strings.Contains(out, "partner") || !strings.Contains(out, "disabled (maintenance)") {
		t.Fatalf("endpoints list: %v\n%s", err, out)
	}
	opsJSON(t, &change, with("endpoints", "enable", "partner")...)
	if change.State != "enabled" || !change.Changed {
		t.Fatalf("enable: %+v", change)
	}

	if out, err := runOps(t, with("endpoints", "test", "partner")...); err != nil || !strings.Contains(out, "status 204") {
		t.Fatalf("endpoints test: %v\n%s", err, out)
	}
	if n := recv.testEvents(); n != 1 {
		t.Fatalf("the receiver got %d test events, want 1", n)
	}

	var rep struct {
		Matched, Queued int
		DryRun          bool `json:"dry_run"`
	}
	opsJSON(t, &rep, with("endpoints", "replay", "partner", "--id", "ord-1-created", "--dry-run")...)
	if rep.Matched != 1 || rep.Queued != 0 || !rep.DryRun {
		t.Fatalf("replay --dry-run: %+v", rep)
	}
	opsJSON(t, &rep, with("endpoints", "replay", "partner", "--id", "ord-1-created")...)
	if rep.Matched != 1 || rep.Queued != 1 {
		t.Fatalf("replay: %+v", rep)
	}
	hookbridgetest.Eventually(t, time.Minute, "the replayed event arrives", func() bool { return recv.count("ord-1-created") == 3 })
	if n := recv.count("ord-1-created"); n != 3 {
		t.Fatalf("the receiver got ord-1-created %d times, want 3 (the dry runs sent nothing)", n)
	}
}
