package bridge_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestConflictStaysWithinPublishTimeout: PublishTimeout bounds the whole
// wait on JetStream for one request, not each step of it. A stream leader
// election in a cluster usually takes HOOKS and the conflicts stream away
// together; here HOOKS answers nobody for 2.5 s and the conflicts stream
// not at all. A conflicting delivery must be answered 503 once the 4 s
// budget is spent, not after the HOOKS retries plus a fresh 4 s for the
// conflict record (6.5 s, past what senders like GitHub wait).
func TestConflictStaysWithinPublishTimeout(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	sc := schemeNamed(t, verify.SchemeGitHub)
	const budget = 4 * time.Second
	in := serveOn(t, js.JS, bridge.Options{PublishTimeout: budget}, sc.source(t))
	in.js = js

	h, body, _ := sc.sample("evt-1")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)

	ctx := context.Background()
	if err := js.JS.DeleteStream(ctx, stream.Conflicts); err != nil {
		t.Fatal(err)
	}
	hooks, err := js.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hooks.CachedInfo().Config
	away := cfg
	away.Subjects = []string{"elsewhere.>"}
	if _, err := js.JS.UpdateStream(ctx, away); err != nil {
		t.Fatal(err)
	}
	back := make(chan error, 1)
	go func() {
		time.Sleep(2500 * time.Millisecond)
		_, err := js.JS.UpdateStream(ctx, cfg)
		back <- err
	}()

	h2, _, _ := sc.sample("evt-1")
	other := []byte(`{"action":"closed","issue":{"number":1347}}`)
	sc.sign(t, sc.secrets[0], in.clock.Now(), h2, other)
	start := time.Now()
	a := in.post(t, sc.name, h2, other)
	took := time.Since(start)
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	if a.code != http.StatusServiceUnavailable {
		t.Fatalf("answer %d %s, want 503 (the conflict could not be recorded)", a.code, a.raw)
	}
	// Spending the budget twice would answer after 6.5 s; 1.5 s above the
	// budget leaves a loaded machine room and still tells the two apart.
	if took > budget+1500*time.Millisecond {
		t.Fatalf("answered after %v, PublishTimeout is %v", took, budget)
	}
}
