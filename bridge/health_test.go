package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestPublishHealthWhileStreamFull fills a HOOKS limited to 16 KiB: the
// refused deliveries are answered 503 with Retry-After, at once and with
// one ERROR line for all of them; PublishHealth is red while the stream
// is full, turns green without any traffic once room returns (here a
// purge; in production consumers' progress and trimming), and the next
// delivery is stored.
func TestPublishHealthWhileStreamFull(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	if err := stream.EnsureIngress(context.Background(), js.JS, stream.Options{MaxBytes: 16 << 10}); err != nil {
		t.Fatal(err)
	}
	sc := schemeNamed(t, verify.SchemeGitHub)
	var logs hookbridgetest.LogBuffer
	in := serveOn(t, js.JS, bridge.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, sc.source(t))
	in.js = js
	if err := in.h.PublishHealth(); err != nil {
		t.Fatalf("PublishHealth before any refusal: %v", err)
	}

	accepted, refused := 0, 0
	for i := 0; i < 500 && refused < 20; i++ {
		h, body, _ := sc.sample(fmt.Sprintf("fill-%d", i))
		sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
		a := in.post(t, sc.name, h, body)
		switch a.code {
		case http.StatusAccepted:
			if refused > 0 {
				t.Fatalf("202 after the stream was full")
			}
			accepted++
		case http.StatusServiceUnavailable:
			if a.header.Get("Retry-After") == "" || a.body.Error != "broker refused: stream full" {
				t.Fatalf("refusal %d %q Retry-After=%q, want 'broker refused: stream full' with Retry-After", a.code, a.body.Error, a.header.Get("Retry-After"))
			}
			refused++
		default:
			t.Fatalf("answer %d %s", a.code, a.raw)
		}
	}
	if accepted == 0 || refused < 20 {
		t.Fatalf("%d accepted, %d refused: the stream never filled", accepted, refused)
	}
	wantMsgs(t, in, uint64(accepted))
	err := in.h.PublishHealth()
	if err == nil || !strings.Contains(err.Error(), "stream full") {
		t.Fatalf("PublishHealth while full = %v, want a stream-full error", err)
	}
	if l := logs.Lines(); len(l) != 1 || !strings.Contains(l[0], "level=ERROR") {
		t.Fatalf("%d refusals logged %d lines, want one ERROR line: %q", refused, len(l), l)
	}

	// Room returns without traffic: the probe sees it.
	s, err := js.JS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, time.Minute, "PublishHealth green after the purge", func() bool { return in.h.PublishHealth() == nil })

	h, body, _ := sc.sample("after")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)
	if err := in.h.PublishHealth(); err != nil {
		t.Fatalf("PublishHealth after a stored publish: %v", err)
	}
}
