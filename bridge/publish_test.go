package bridge_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// serveOn serves a handler for sources on js over real HTTP.
func serveOn(t testing.TB, js jetstream.JetStream, opts bridge.Options, sources ...bridge.Source) *ingress {
	t.Helper()
	c := newClock(time.Now())
	opts.Sources, opts.Now = sources, c.Now
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	h, err := bridge.New(js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &ingress{h: h, clock: c, url: serveHTTP(t, h)}
}

// streamsLater serves sc's source on a JetStream that has no streams yet
// and creates the ingress streams after delay, as when HOOKS comes back
// after a leader election.
func streamsLater(t *testing.T, sc scheme, opts bridge.Options, delay time.Duration) *ingress {
	t.Helper()
	js := hookbridgetest.NATS(t)
	in := serveOn(t, js.JS, opts, sc.source(t))
	in.js = js
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(delay)
		if err := stream.EnsureIngress(context.Background(), js.JS, stream.Options{}); err != nil {
			t.Errorf("create streams: %v", err)
		}
	}()
	// The test may end as soon as HOOKS exists, while the other streams
	// are still being created: wait for them before the connection closes
	// (cleanups run last-registered first).
	t.Cleanup(func() { <-done })
	return in
}

// sendConcurrently posts n distinct signed deliveries at once and returns
// the answers by status and the slowest answer's time.
func sendConcurrently(t *testing.T, in *ingress, sc scheme, prefix string, n int) (map[int]int, time.Duration) {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		codes   = map[int]int{}
		slowest time.Duration
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, body, _ := sc.sample(fmt.Sprintf("%s-%d", prefix, i))
			sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
			start := time.Now()
			a := in.post(t, sc.name, h, body)
			mu.Lock()
			defer mu.Unlock()
			codes[a.code]++
			slowest = max(slowest, time.Since(start))
		}()
	}
	wg.Wait()
	return codes, slowest
}

// TestPublishWaitsForTheStream: deliveries arrive while HOOKS does not
// exist yet (nobody answers the publish, as during a leader election) and
// the stream appears 1.5 s later, within PublishTimeout (30 s: the
// stream's creation may come late on a loaded machine). Every delivery is
// retried with its Nats-Msg-Id until it is stored: all 202, each stored
// once. (Before, each was 503 after the client's own 0.5 s of retries.)
func TestPublishWaitsForTheStream(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	in := streamsLater(t, sc, bridge.Options{PublishTimeout: 30 * time.Second}, 1500*time.Millisecond)
	const n = 20
	codes, slowest := sendConcurrently(t, in, sc, "late", n)
	if codes[http.StatusAccepted] != n {
		t.Fatalf("answers %v, want %d × 202", codes, n)
	}
	if slowest < time.Second {
		t.Fatalf("slowest answer after %v: the stream cannot have been there yet", slowest)
	}
	wantMsgs(t, in, n)
}

// TestPublishRidesOutServerRestart stops the NATS server under traffic
// and starts it again on the same port and store a second later: the
// requests sent meanwhile wait for the reconnect and are stored, each
// exactly once.
func TestPublishRidesOutServerRestart(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	sc := schemeNamed(t, verify.SchemeGitHub)
	// The restart may take seconds on a loaded machine; the requests wait.
	in := serveOn(t, js.JS, bridge.Options{PublishTimeout: 30 * time.Second}, sc.source(t))

	storeDir := js.Server.StoreDir()
	tcpPort := js.Server.Addr().(*net.TCPAddr).Port

	js.Server.Shutdown()
	js.Server.WaitForShutdown()
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(time.Second)
		ns, err := embedded.Start(embedded.Options{StoreDir: storeDir, Listen: true, Port: tcpPort})
		if err != nil {
			t.Errorf("restart: %v", err)
			return
		}
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	}()
	const n = 10
	codes, _ := sendConcurrently(t, in, sc, "restart", n)
	<-restarted
	if codes[http.StatusAccepted] != n {
		t.Fatalf("answers %v, want %d × 202", codes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("HOOKS holds %d messages, want %d", info.State.Msgs, n)
	}
}

// TestPublishDoesNotRetryWhatCannotChange: the hooks subjects are bound to
// a stream other than HOOKS, so JetStream refuses the publish ("expected
// stream does not match"). Retrying cannot help: the answer is 503 at
// once, not after the PublishTimeout budget.
func TestPublishDoesNotRetryWhatCannotChange(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	if _, err := js.JS.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OTHER", Subjects: []string{stream.HooksRoot + ".>"}}); err != nil {
		t.Fatal(err)
	}
	sc := schemeNamed(t, verify.SchemeGitHub)
	// A budget far above what one answer takes on a loaded machine: an
	// answer well inside it was not retried until the budget ran out.
	in := serveOn(t, js.JS, bridge.Options{PublishTimeout: time.Minute}, sc.source(t))
	h, body, _ := sc.sample("evt-1")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	start := time.Now()
	a := in.post(t, sc.name, h, body)
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Fatalf("answer %d %s, want 503 with Retry-After", a.code, a.raw)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("answered after %v: a refusal that cannot change was retried", d)
	}
	if n := js.StreamMsgs(t, "OTHER"); n != 0 {
		t.Fatalf("OTHER holds %d messages", n)
	}
}
