package bridge

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestBudgetsComeBackOnEveryPath sends requests that end every way a
// request can end (accepted, duplicate, conflict, bad signature, not
// JSON, too large declared and chunked, over the memory budget, client
// gone mid-body, a panicking verifier) and checks afterwards that the body
// memory budget and the in-flight slots are all returned: none leaks and
// none is given back twice.
func TestBudgetsComeBackOnEveryPath(t *testing.T) {
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	const secret = "leak-secret"
	gh, err := verify.NewGitHub([]string{secret})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(js.JS, Options{
		Sources: []Source{
			{Name: "github", Verifier: gh, EventID: Field{Header: "X-GitHub-Delivery"}, EventType: Field{Header: "X-GitHub-Event", Suffix: "/action"}},
			{Name: "boom", Verifier: panicky{}, EventID: Field{Header: "X-Id"}, EventType: Field{Header: "X-Type"}},
		},
		MaxBodyBytes:  64 << 10,
		MaxBodyMemory: 200 << 10,
		MaxInFlight:   4,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Pattern, h)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config = NewHTTPServer(mux, DefaultLimits())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic is expected
	srv.Start()
	defer srv.Close()

	post := func(source, id string, body []byte, sign bool, chunked bool) int {
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // no length known: sent chunked
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/"+source, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-GitHub-Event", "issues")
		req.Header.Set("X-Id", id)
		req.Header.Set("X-Type", "t")
		if sign {
			req.Header.Set(verify.GitHubHeaderSignature, verify.SignGitHub(secret, body))
		} else {
			req.Header.Set(verify.GitHubHeaderSignature, verify.SignGitHub("other", body))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0 // the server may close the connection on a refusal
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	ok := []byte(`{"action":"opened"}`)
	codes := []int{
		post("github", "d-1", ok, true, false),                                               // 202
		post("github", "d-1", ok, true, false),                                               // 200 duplicate
		post("github", "d-1", []byte(`{"action":"closed"}`), true, false),                    // 409
		post("github", "d-2", ok, false, false),                                              // 401
		post("github", "d-3", []byte(`not json`), true, false),                               // 400
		post("github", "d-4", bytes.Repeat([]byte(" "), 65<<10), true, false),                // 413 declared
		post("github", "d-5", bytes.Repeat([]byte(" "), 65<<10), true, true),                 // 413 chunked
		post("github", "d-6", append(bytes.Repeat([]byte(" "), 40<<10), ok...), true, false), // 202, grows past the first chunk
		post("github", "d-7", append(bytes.Repeat([]byte(" "), 40<<10), ok...), true, true),  // 202, chunked
		post("boom", "b-1", ok, true, false),                                                 // panic: connection dropped
	}
	t.Logf("answers %v", codes)
	for i, want := range []int{202, 200, 409, 401, 400, 413, 413, 202, 202, 0} {
		if codes[i] != want {
			t.Errorf("request %d: answer %d, want %d", i, codes[i], want)
		}
	}

	// Five declared 50 KiB bodies, 40 KiB of each sent and then
	// abandoned: each grows past its first chunk, the later ones go over
	// the 200 KiB budget, and all the clients leave mid-body.
	var conns []net.Conn
	for i := range 5 {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		fmt.Fprintf(conn, "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nX-GitHub-Delivery: m-%d\r\nX-GitHub-Event: issues\r\n\r\n%s", 50<<10, i, strings.Repeat(" ", 40<<10))
	}
	time.Sleep(300 * time.Millisecond)
	for _, c := range conns {
		c.Close() // gone mid-body
	}

	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if h.bodies.used.Load() == 0 && len(h.inflight) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after every request ended: %d bytes of body memory and %d in-flight slots still taken", h.bodies.used.Load(), len(h.inflight))
}

// panicky is a verifier that panics, as a bug in one might.
type panicky struct{}

func (panicky) Verify(http.Header, []byte, time.Time) error { panic("verifier bug") }
