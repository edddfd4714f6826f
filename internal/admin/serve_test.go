package admin_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/admin"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// The console's files are served at / without a token (they hold no
// data); the API next to them still needs it.
func TestConsoleFilesWithoutToken(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	h, err := admin.New(admin.Options{Ops: e.ops, Token: apiToken, Console: fstest.MapFS{
		"index.html": {Data: []byte("<!doctype html><title>hookbridge</title>")},
		"app.js":     {Data: []byte("console.log(1)")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := newServer(t, h)
	for path, want := range map[string]string{"/": "<title>hookbridge", "/app.js": "console.log"} {
		resp, err := http.Get(srv + path)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 512)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b[:n]), want) || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: %d %q, X-Frame-Options %q", path, resp.StatusCode, b[:n], resp.Header.Get("X-Frame-Options"))
		}
		// Only the console's own files may load or run (the browser tests
		// prove the console works under this policy).
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	resp, err := http.Post(srv+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
	resp, err = http.Get(srv + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("API next to the console without a token: %d, want 401", resp.StatusCode)
	}
}

// A NATS server older than 2.11 cannot pause consumers: the API answers
// 409 with the reason instead of waiting for an answer that never comes.
// It needs such a server: .ci/run sets HOOKBRIDGE_COMPAT_NATS_URL to the
// machine's nats-server 2.9.
func TestPauseRefusedByOldServer(t *testing.T) {
	t.Parallel()
	url := os.Getenv("HOOKBRIDGE_COMPAT_NATS_URL")
	if url == "" {
		t.Skip("HOOKBRIDGE_COMPAT_NATS_URL is not set; .ci/run sets it to the system NATS server (2.9)")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("external NATS at %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e := newAPIEnv(t)
	old := &ops.Ops{Pool: e.ops.Pool, JS: js, Consumers: e.ops.Consumers}
	h, err := admin.New(admin.Options{Ops: old, Token: apiToken})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	e.srv.Config.Handler = h
	var body struct{ Error string }
	e.mustCall(t, "POST", "/api/v1/consumers/orders/pause", map[string]any{}, http.StatusConflict, &body)
	if !strings.Contains(body.Error, "2.11") || !strings.Contains(body.Error, nc.ConnectedServerVersion()) {
		t.Fatalf("pause on %s: %q", nc.ConnectedServerVersion(), body.Error)
	}
	e.mustCall(t, "POST", "/api/v1/consumers/orders/resume", map[string]any{}, http.StatusConflict, nil)
}
