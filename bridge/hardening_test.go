package bridge_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// held is a request whose body is being read by the handler and is not
// finished: it holds its body buffer until release.
type held struct {
	pw   *io.PipeWriter
	rest []byte
	rec  *httptest.ResponseRecorder
	done chan struct{}
}

// hold starts serving a signed delivery whose body arrives through a pipe
// (chunked: no length declared) and returns once the handler has read its
// first byte, so it is waiting for the rest.
func hold(t *testing.T, in *ingress, sc scheme, id string) *held {
	t.Helper()
	h, body, _ := sc.sample(id)
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	pr, pw := io.Pipe()
	req := httptest.NewRequest(http.MethodPost, "/webhooks/"+sc.name, pr)
	req.SetPathValue("source", sc.name)
	req.Header = h
	hd := &held{pw: pw, rest: body[1:], rec: httptest.NewRecorder(), done: make(chan struct{})}
	go func() {
		defer close(hd.done)
		in.h.ServeHTTP(hd.rec, req)
	}()
	// A pipe write returns only once the reader took the byte.
	if _, err := pw.Write(body[:1]); err != nil {
		t.Fatalf("handler did not read the body: %v (answer %d %s)", err, hd.rec.Code, hd.rec.Body)
	}
	return hd
}

// release sends the rest of the body and returns the status.
func (hd *held) release(t *testing.T) int {
	t.Helper()
	if _, err := hd.pw.Write(hd.rest); err != nil {
		t.Fatal(err)
	}
	hd.pw.Close()
	<-hd.done
	return hd.rec.Code
}

// inPublish starts a signed delivery that reaches the publish and stays
// there: HOOKS does not exist and a plain subscriber on the hooks
// subjects (which never answers) shows when the publish was sent, so the
// request holds its in-flight slot while it retries. It returns the
// subscription (unsubscribe, then create the streams, to let it finish)
// and a channel with the request's answer.
func inPublish(t *testing.T, in *ingress, sc scheme, id string) (*nats.Subscription, <-chan answer) {
	t.Helper()
	sub, err := in.js.Conn.SubscribeSync(stream.HooksRoot + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := in.js.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	h, body, _ := sc.sample(id)
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	done := make(chan answer, 1)
	go func() { done <- in.post(t, sc.name, h, body) }()
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the request never reached the publish: %v", err)
	}
	return sub, done
}

// TestMaxInFlight fills the only slot with a request that is publishing
// (and retrying, the stream being absent): the next request is answered
// 503 with Retry-After at once and publishes nothing; once the stream
// exists the first is stored, and the slot is free again.
func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	js := hookbridgetest.NATS(t)
	in := serveOn(t, js.JS, bridge.Options{MaxInFlight: 1, RetryAfter: 7 * time.Second, PublishTimeout: 4 * time.Second}, sc.source(t))
	in.js = js

	sub, first := inPublish(t, in, sc, "evt-1")
	h, body, _ := sc.sample("evt-2")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	a := in.post(t, sc.name, h, body)
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "7" || a.body.Error != "overloaded" {
		t.Fatalf("over the limit: answer %d Retry-After=%q %s, want 503, 7, overloaded", a.code, a.header.Get("Retry-After"), a.raw)
	}

	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	js.EnsureHooks(t)
	if a := <-first; a.code != http.StatusAccepted {
		t.Fatalf("request holding the slot: answer %d %s, want 202", a.code, a.raw)
	}
	wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)
	wantMsgs(t, in, 2)
}

// TestMaxInFlightNegativeIsUnbounded: with the bound switched off a
// request stuck in its publish does not stop the next one.
func TestMaxInFlightNegativeIsUnbounded(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	js := hookbridgetest.NATS(t)
	in := serveOn(t, js.JS, bridge.Options{MaxInFlight: -1, PublishTimeout: 4 * time.Second}, sc.source(t))
	in.js = js
	sub, first := inPublish(t, in, sc, "evt-1")
	h, body, _ := sc.sample("evt-2")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	second := make(chan answer, 1)
	go func() { second <- in.post(t, sc.name, h, body) }()
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the second request did not reach the publish: %v", err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	js.EnsureHooks(t)
	for i, ch := range []<-chan answer{first, second} {
		if a := <-ch; a.code != http.StatusAccepted {
			t.Fatalf("request %d: answer %d %s, want 202", i+1, a.code, a.raw)
		}
	}
	wantMsgs(t, in, 2)
}

// TestBodyMemoryBound: bodies being read reserve their buffers against
// MaxBodyMemory. Two chunked bodies still arriving hold 8 KiB of a 10,000
// byte budget; a third declaring 2,000 bytes is answered 503 overloaded
// at once, before its body is read. When one finishes, the budget is
// back and the third is accepted.
func TestBodyMemoryBound(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	// MaxBodyBytes below the budget: New refuses a budget that cannot
	// hold one body at the limit.
	in := newIngress(t, bridge.Options{MaxBodyBytes: 9999, MaxBodyMemory: 10000}, sc.source(t))
	first := hold(t, in, sc, "evt-1")
	second := hold(t, in, sc, "evt-2")
	h, _, _ := sc.sample("evt-3")
	body := []byte(`{"action":"opened","pad":"` + strings.Repeat("x", 2000-len(`{"action":"opened","pad":""}`)) + `"}`)
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	a := in.post(t, sc.name, h, body)
	if a.code != http.StatusServiceUnavailable || a.body.Error != "overloaded" || a.header.Get("Retry-After") == "" {
		t.Fatalf("over the memory budget: answer %d %s, want 503 overloaded", a.code, a.raw)
	}
	if code := first.release(t); code != http.StatusAccepted {
		t.Fatalf("held request: answer %d %s, want 202", code, first.rec.Body)
	}
	wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)
	if code := second.release(t); code != http.StatusAccepted {
		t.Fatalf("held request: answer %d %s, want 202", code, second.rec.Body)
	}
	wantMsgs(t, in, 3)
}

// TestMaxInFlightUnderLoad sends many distinct deliveries at once through
// a small bound: every answer is 202 or 503, and HOOKS holds exactly the
// accepted ones.
func TestMaxInFlightUnderLoad(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeStripe)
	in := newIngress(t, bridge.Options{MaxInFlight: 4}, sc.source(t))
	const n = 64
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[int]int{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, body, _ := sc.sample(fmt.Sprintf("evt_%d", i))
			sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
			a := in.post(t, sc.name, h, body)
			mu.Lock()
			counts[a.code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[http.StatusAccepted]+counts[http.StatusServiceUnavailable] != n || counts[http.StatusAccepted] == 0 {
		t.Fatalf("answers %v, want only 202 and 503, some 202", counts)
	}
	wantMsgs(t, in, uint64(counts[http.StatusAccepted]))
}

// TestBodyLimit reads at most MaxBodyBytes, before any verification,
// whether the length is declared or the body is chunked.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	in := newIngress(t, bridge.Options{MaxBodyBytes: 1024}, sc.source(t))
	h, _, _ := sc.sample("evt-big")
	big := []byte(`{"action":"opened","pad":"` + strings.Repeat("x", 2000) + `"}`)
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, big)

	a := in.post(t, sc.name, h, big) // Content-Length: 2000+
	if a.code != http.StatusRequestEntityTooLarge || a.body.Error != "body too large" {
		t.Fatalf("declared length: answer %d %s, want 413", a.code, a.raw)
	}
	// Chunked: no length declared; the limit is hit while reading.
	req, _ := http.NewRequest(http.MethodPost, in.url+"/webhooks/"+sc.name, io.MultiReader(bytes.NewReader(big)))
	req.Header = h.Clone()
	if req.ContentLength != 0 {
		t.Fatal("request would declare its length")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: answer %d, want 413", resp.StatusCode)
	}
	wantMsgs(t, in, 0)

	// Exactly at the limit is fine.
	exact := []byte(`{"action":"opened","pad":"` + strings.Repeat("x", 1024-len(`{"action":"opened","pad":""}`)) + `"}`)
	h, _, _ = sc.sample("evt-exact")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, exact)
	wantCode(t, in.post(t, sc.name, h, exact), http.StatusAccepted)
	wantMsgs(t, in, 1)
}

// TestDefaultLimits pins the limits `hookbridge serve` runs with (they are
// documented in docs/INGRESS.md) and that zero fields take them.
func TestDefaultLimits(t *testing.T) {
	t.Parallel()
	want := bridge.Limits{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      40 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if got := bridge.DefaultLimits(); got != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", got, want)
	}
	srv := bridge.NewHTTPServer(http.NotFoundHandler(), bridge.Limits{ReadTimeout: time.Second})
	if srv.ReadTimeout != time.Second || srv.ReadHeaderTimeout != want.ReadHeaderTimeout ||
		srv.WriteTimeout != want.WriteTimeout || srv.IdleTimeout != want.IdleTimeout || srv.MaxHeaderBytes != want.MaxHeaderBytes {
		t.Fatalf("NewHTTPServer limits = %v %v %v %v %d", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if want.WriteTimeout < want.ReadTimeout+5*time.Second {
		t.Fatal("WriteTimeout must cover the body read and the default publish timeout")
	}
}

// limitedServer serves a GitHub source through bridge.NewHTTPServer with
// limits on a real listener.
func limitedServer(t *testing.T, limits bridge.Limits) (*hookbridgetest.JetStream, scheme, string) {
	t.Helper()
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	sc := schemeNamed(t, verify.SchemeGitHub)
	h, err := bridge.New(js.JS, bridge.Options{Sources: []bridge.Source{sc.source(t)}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(bridge.Pattern, h)
	srv := bridge.NewHTTPServer(mux, limits)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return js, sc, ln.Addr().String()
}

// rawRequest is a signed delivery as HTTP/1.1 bytes: head and body.
func rawRequest(t *testing.T, sc scheme, id string) (head, body []byte) {
	t.Helper()
	h, body, _ := sc.sample(id)
	sc.sign(t, sc.secrets[0], time.Now(), h, body)
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /webhooks/%s HTTP/1.1\r\nHost: hookbridge\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", sc.name, len(body))
	_ = h.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes(), body
}

// trickle writes p one byte every interval until done or the connection
// breaks, and reports how many bytes went out.
func trickle(conn net.Conn, p []byte, interval time.Duration) <-chan int {
	sent := make(chan int, 1)
	go func() {
		n := 0
		for ; n < len(p); n++ {
			if _, err := conn.Write(p[n : n+1]); err != nil {
				break
			}
			time.Sleep(interval)
		}
		sent <- n
	}()
	return sent
}

// TestSlowBodyIsCutOff sends a valid signed delivery's headers at once and
// then its body a byte every 50 ms, which would take seconds: the server's
// ReadTimeout ends the request well before, nothing is published, and the
// same request sent at normal speed is accepted.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	limits := bridge.DefaultLimits()
	limits.ReadTimeout = 300 * time.Millisecond
	const interval = 50 * time.Millisecond
	js, sc, addr := limitedServer(t, limits)
	head, body := rawRequest(t, sc, "evt-slow")
	if trickleTime := time.Duration(len(body)) * interval; trickleTime < 3*limits.ReadTimeout {
		t.Fatalf("body too short to outlast the timeout (%v)", trickleTime)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := conn.Write(head); err != nil {
		t.Fatal(err)
	}
	sent := trickle(conn, body, interval)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	elapsed := time.Since(start)
	t.Logf("slow body: after %v: %v", elapsed, err)
	switch {
	case err == nil:
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("slow body: answer %d, want 400 (body unreadable) or a closed connection", resp.StatusCode)
		}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("slow body: no answer and connection still open after %v", elapsed)
		}
	}
	if elapsed < limits.ReadTimeout-50*time.Millisecond || elapsed > limits.ReadTimeout+2*time.Second {
		t.Fatalf("slow body ended after %v, want about ReadTimeout %v", elapsed, limits.ReadTimeout)
	}
	conn.Close()
	if n := <-sent; n >= len(body) {
		t.Fatalf("whole body went out (%d bytes); the server did not cut it off", n)
	}
	if n := js.StreamMsgs(t, "HOOKS"); n != 0 {
		t.Fatalf("HOOKS holds %d messages after a cut-off request, want 0", n)
	}

	// Control: the same delivery at full speed passes these limits.
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if _, err := conn2.Write(append(head, body...)); err != nil {
		t.Fatal(err)
	}
	_ = conn2.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(conn2), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("fast request: answer %d, want 202", resp.StatusCode)
	}
	if n := js.StreamMsgs(t, "HOOKS"); n != 1 {
		t.Fatalf("HOOKS holds %d messages, want 1", n)
	}
}

// TestSlowHeadersAreCutOff trickles the header block itself: the server's
// ReadHeaderTimeout closes the connection before the handler runs.
func TestSlowHeadersAreCutOff(t *testing.T) {
	t.Parallel()
	limits := bridge.DefaultLimits()
	limits.ReadHeaderTimeout = 300 * time.Millisecond
	js, sc, addr := limitedServer(t, limits)
	head, _ := rawRequest(t, sc, "evt-slow-head")

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	sent := trickle(conn, head, 20*time.Millisecond)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(conn) // the server answers nothing useful; it closes
	elapsed := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("slow headers: connection still open after %v", elapsed)
	}
	if elapsed > limits.ReadHeaderTimeout+2*time.Second {
		t.Fatalf("slow headers ended after %v, want about %v", elapsed, limits.ReadHeaderTimeout)
	}
	conn.Close()
	if n := <-sent; n >= len(head) {
		t.Fatalf("whole head went out (%d bytes); the server did not cut it off", n)
	}
	if n := js.StreamMsgs(t, "HOOKS"); n != 0 {
		t.Fatalf("HOOKS holds %d messages, want 0", n)
	}
}

// TestOversizedHeadersAreRefused sends more header bytes than
// MaxHeaderBytes allows: 431, and the handler never runs.
func TestOversizedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	js, sc, addr := limitedServer(t, bridge.DefaultLimits())
	h, body, _ := sc.sample("evt-fat")
	sc.sign(t, sc.secrets[0], time.Now(), h, body)
	h.Set("X-Padding", strings.Repeat("p", 128<<10))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/"+sc.name, bytes.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("answer %d, want 431", resp.StatusCode)
	}
	if n := js.StreamMsgs(t, "HOOKS"); n != 0 {
		t.Fatalf("HOOKS holds %d messages, want 0", n)
	}
}
