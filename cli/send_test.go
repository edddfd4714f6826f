package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// startServe runs serve with the built-in handlers on db and an embedded
// JetStream in a directory of the test's own until the test ends, and
// returns the ingress's address once it is ready, and that directory.
func startServe(t *testing.T, db *hookbridgetest.Database) (addr, dataDir string) {
	t.Helper()
	_, addr, dataDir = serveWith(t, db, noEnv)
	return addr, dataDir
}

// serveWith is startServe with the environment env; it returns the
// server too.
func serveWith(t *testing.T, db *hookbridgetest.Database, env app.Env) (srv *app.Server, addr, dataDir string) {
	t.Helper()
	handlers := builtin.Handlers()
	dataDir = t.TempDir()
	cfg, err := app.Load("", env, app.Overrides{DatabaseURL: db.URL, DataDir: dataDir, HTTPAddr: "127.0.0.1:0"}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	srv, addr = runServer(t, cfg, handlers)
	return srv, addr, dataDir
}

// runServer runs serve with cfg and handlers until the test ends, and
// returns it and the ingress's address once it is ready.
func runServer(t *testing.T, cfg app.Config, handlers app.Handlers) (srv *app.Server, addr string) {
	t.Helper()
	srv, err := app.NewServer(cfg, handlers, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { addrc <- addr }) }()
	select {
	case addr = <-addrc:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	hookbridgetest.Eventually(t, time.Minute, "serve ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return srv, addr
}

// adminCall sends a request to serve's admin API at addr with token, body
// (when not nil) as JSON, and returns the answer's status and body.
func adminCall(t *testing.T, addr, token, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// runMain runs the command line as Main does with the built-in handlers
// and returns its exit code and what it printed on stdout and stderr.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runMainWith(t, builtin.Handlers(), args...)
}

// runMainWith is runMain with handlers.
func runMainWith(t *testing.T, handlers app.Handlers, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rt := &runtime{handlers: handlers, stdout: &out, stderr: &errOut, env: noEnv}
	code = run(context.Background(), args, rt, func(code int) { t.Fatalf("command line exited with %d: %s", code, errOut.String()) })
	return code, out.String(), errOut.String()
}

// The same send a while later is a repeat of the first (200 duplicate,
// exit 0), not a conflict: the body does not carry the time it was sent.
// Other data under the same id is a conflict and exits non-zero; each
// answer's status line is printed either way.
func TestSendRepeatIsADuplicateAndExitFollowsTheAnswer(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	addr, _ := startServe(t, db)
	send := func(data string) (int, string, string) {
		return runMain(t, "send", "--http-addr", addr, "--id", "evt-repeat", "--type", orders.Created, "--data", data)
	}
	data := `{"order_id":"o-1","amount_cents":500,"currency":"EUR"}`
	if code, out, errOut := send(data); code != 0 || !strings.HasPrefix(out, "202 Accepted evt-repeat\n") {
		t.Fatalf("first send: exit %d\n%s%s", code, out, errOut)
	}
	// The body's timestamp used to be the time of sending, to the second:
	// a repeat more than a second later differed from the first.
	time.Sleep(1100 * time.Millisecond)
	if code, out, errOut := send(data); code != 0 || !strings.HasPrefix(out, "200 OK evt-repeat\n") || !strings.Contains(out, `"duplicate"`) {
		t.Fatalf("repeated send: exit %d, want 0 and 200 duplicate\n%s%s", code, out, errOut)
	}
	code, out, errOut := send(`{"order_id":"o-1","amount_cents":999,"currency":"EUR"}`)
	if code == 0 || !strings.HasPrefix(out, "409 Conflict evt-repeat\n") || !strings.Contains(errOut, "409") {
		t.Fatalf("send with other data: exit %d, want non-zero and 409 printed\n%s%s", code, out, errOut)
	}
	// The ingress's conflict reaches the table through its own stream.
	if n := db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.conflicts WHERE event_id = 'evt-repeat'`); n != 1 {
		t.Fatalf("conflicts = %d, want 1 (the other data only)", n)
	}
	hookbridgetest.Eventually(t, time.Minute, "the event applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM demo.orders WHERE order_id = 'o-1'`) == 1
	})
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'evt-repeat'`); n != 1 {
		t.Fatalf("inbox rows = %d, want 1", n)
	}
}

// send's body is a function of its flags only: the same flags give the
// same bytes, whenever they are sent.
func TestSendBodyIsStable(t *testing.T) {
	t.Parallel()
	c := sendCmd{Type: "order.created", Data: `{"a": 1}`, Timestamp: "1970-01-01T00:00:00Z"}
	a, err := c.body()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"order.created","timestamp":"1970-01-01T00:00:00Z","data":{"a":1}}`; string(a) != want {
		t.Fatalf("body %s, want %s", a, want)
	}
	c.Timestamp = "yesterday"
	if _, err := c.body(); err == nil || !strings.Contains(err.Error(), "--timestamp") {
		t.Fatalf("bad --timestamp: %v", err)
	}
}
