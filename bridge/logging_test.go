package bridge_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestNoLogLinePerRequest: at the default info level accepted requests
// log nothing, and a run of refusals with one cause logs one line per
// LogInterval with the count of suppressed ones. At debug every request
// has its line.
func TestNoLogLinePerRequest(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	var buf hookbridgetest.LogBuffer
	const interval = time.Minute
	in := newIngress(t, bridge.Options{
		Logger:      slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		LogInterval: interval,
	}, sc.source(t))

	for i := range 20 {
		h, body, _ := sc.sample(fmt.Sprintf("ok-%d", i))
		sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
		wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)
	}
	if l := buf.Lines(); len(l) != 0 {
		t.Fatalf("accepted requests logged %d lines at info, want none: %q", len(l), l)
	}

	bad := func(n int) {
		for i := range n {
			h, body, _ := sc.sample(fmt.Sprintf("bad-%d", i))
			sc.sign(t, sc.stranger, in.clock.Now(), h, body)
			wantCode(t, in.post(t, sc.name, h, body), http.StatusUnauthorized)
		}
	}
	bad(30) // the handler's clock stands still meanwhile
	if l := buf.Lines(); len(l) != 1 || !strings.Contains(l[0], "level=WARN") || !strings.Contains(l[0], `reason="signature: mismatch"`) {
		t.Fatalf("30 refusals logged %q, want one WARN line", l)
	}
	in.clock.Set(in.clock.Now().Add(interval))
	bad(1)
	l := buf.Lines()
	if len(l) != 2 || !strings.Contains(l[1], "suppressed=29") {
		t.Fatalf("after the interval: %q, want a second line with suppressed=29", l)
	}

	var dbg hookbridgetest.LogBuffer
	in2 := newIngress(t, bridge.Options{Logger: slog.New(slog.NewTextHandler(&dbg, &slog.HandlerOptions{Level: slog.LevelDebug}))}, sc.source(t))
	for i := range 3 {
		h, body, _ := sc.sample(fmt.Sprintf("dbg-%d", i))
		sc.sign(t, sc.secrets[0], in2.clock.Now(), h, body)
		wantCode(t, in2.post(t, sc.name, h, body), http.StatusAccepted)
	}
	if l := dbg.Lines(); len(l) != 3 || !strings.Contains(l[0], "level=DEBUG") {
		t.Fatalf("debug: %q, want a DEBUG line per request", l)
	}
}
