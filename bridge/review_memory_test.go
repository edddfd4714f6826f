package bridge_test

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestDeclaredLengthDoesNotReserveMemory: a sender that declares a large
// Content-Length and then sends next to nothing must hold only the memory
// it has sent, not the whole declared length. Otherwise a few connections
// that each promise a body at max_body_bytes fill MaxBodyMemory with
// promises and every other sender is answered 503 overloaded; since each
// is cut off by the minimum rate only after a few seconds, reconnecting
// keeps the ingress refusing for a handful of bytes per second. Here 16
// such connections would take the whole 16-body budget; normal signed
// traffic sent meanwhile must all be accepted.
func TestDeclaredLengthDoesNotReserveMemory(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	sc := schemeNamed(t, verify.SchemeGitHub)
	const maxBody = 256 << 10
	in := serveOn(t, js.JS, bridge.Options{MaxBodyBytes: maxBody, MaxBodyMemory: 16 * (maxBody + 1)}, sc.source(t))
	in.js = js
	addr := in.url[len("http://"):]

	for i := range 16 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		h, _, _ := sc.sample(fmt.Sprintf("promise-%d", i))
		req := fmt.Sprintf("POST /webhooks/%s HTTP/1.1\r\nHost: hookbridge\r\nContent-Type: application/json\r\nContent-Length: %d\r\nX-GitHub-Delivery: %s\r\nX-GitHub-Event: issues\r\nX-Hub-Signature-256: sha256=00\r\n\r\n{",
			sc.name, maxBody, h.Get("X-GitHub-Delivery"))
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // every promise is in its handler

	codes := map[int]int{}
	for i := range 10 {
		h, body, _ := sc.sample(fmt.Sprintf("fast-%d", i))
		sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
		codes[in.post(t, sc.name, h, body).code]++
	}
	if codes[http.StatusAccepted] != 10 {
		t.Fatalf("normal traffic beside 16 large promises: answers %v, want 10 x 202", codes)
	}
	wantMsgs(t, in, 10)
}
