package bridge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestReplayOutsideToleranceIsRefused replays one captured delivery, byte
// for byte, at several moments of the handler's clock. Schemes that sign a
// timestamp refuse it once the timestamp is outside the tolerance (either
// side) with 401; inside the tolerance the replay is a duplicate of the
// stored event (200) and HOOKS still holds one message.
func TestReplayOutsideToleranceIsRefused(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		if !sc.timestamped {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			in := newIngress(t, bridge.Options{}, sc.source(t))
			t0 := in.clock.Now()
			h, body, _ := sc.sample("evt-replayed")
			sc.sign(t, sc.secrets[0], t0, h, body)

			a := in.post(t, sc.name, h, body)
			wantCode(t, a, http.StatusAccepted)
			seq := a.body.Seq

			steps := []struct {
				at     time.Duration // clock offset from the signing time
				code   int
				status string
			}{
				{time.Second, http.StatusOK, "duplicate"},
				{verify.DefaultTolerance - time.Second, http.StatusOK, "duplicate"},
				{verify.DefaultTolerance + time.Second, http.StatusUnauthorized, "error"},
				{time.Hour, http.StatusUnauthorized, "error"},
				// A delivery signed in the future is as suspect.
				{-verify.DefaultTolerance - time.Second, http.StatusUnauthorized, "error"},
				{-verify.DefaultTolerance + time.Second, http.StatusOK, "duplicate"},
			}
			for _, s := range steps {
				in.clock.Set(t0.Add(s.at))
				a := in.post(t, sc.name, h, body)
				if a.code != s.code || a.body.Status != s.status {
					t.Fatalf("replay at %+v: answer %d %s, want %d %s", s.at, a.code, a.raw, s.code, s.status)
				}
				switch s.code {
				case http.StatusOK:
					if a.body.Seq != seq || a.body.EventID != "evt-replayed" {
						t.Fatalf("replay at %+v: duplicate of seq %d (%s), want %d", s.at, a.body.Seq, a.body.EventID, seq)
					}
				case http.StatusUnauthorized:
					if a.body.Error != "signature: stale" {
						t.Fatalf("replay at %+v: error %q, want signature: stale", s.at, a.body.Error)
					}
				}
				wantMsgs(t, in, 1)
			}

			// The refusals were the timestamp's: the same event signed now
			// (a genuine retry by the sender) is a duplicate, not a 401.
			in.clock.Set(t0.Add(time.Hour))
			h, body, _ = sc.sample("evt-replayed")
			sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
			a = in.post(t, sc.name, h, body)
			if a.code != http.StatusOK || a.body.Status != "duplicate" {
				t.Fatalf("fresh retry: answer %d %s, want 200 duplicate", a.code, a.raw)
			}
			wantMsgs(t, in, 1)
		})
	}
}

// TestReplayWithoutTimestampIsDuplicateByID covers GitHub and Shopify,
// which sign no timestamp: a replay an hour later still verifies, and only
// the event id keeps it from being stored twice.
func TestReplayWithoutTimestampIsDuplicateByID(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		if sc.timestamped {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			in := newIngress(t, bridge.Options{}, sc.source(t))
			h, body, _ := sc.sample("evt-replayed")
			sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
			a := in.post(t, sc.name, h, body)
			wantCode(t, a, http.StatusAccepted)

			in.clock.Set(in.clock.Now().Add(time.Hour))
			a = in.post(t, sc.name, h, body)
			if a.code != http.StatusOK || a.body.Status != "duplicate" {
				t.Fatalf("replay: answer %d %s, want 200 duplicate", a.code, a.raw)
			}
			wantMsgs(t, in, 1)

			// A replay that changes the id changes nothing the signature
			// covers in these schemes (the id is a header), so it is
			// stored again: this is the limit of replay protection
			// without a signed timestamp (see docs/INGRESS.md).
			h2 := h.Clone()
			switch sc.name {
			case verify.SchemeGitHub:
				h2.Set("X-GitHub-Delivery", "evt-forged-id")
			case verify.SchemeShopify:
				h2.Set("X-Shopify-Webhook-Id", "evt-forged-id")
			}
			wantCode(t, in.post(t, sc.name, h2, body), http.StatusAccepted)
			wantMsgs(t, in, 2)
		})
	}
}

// TestReplayAfterDuplicateWindow shows what the id dedup can do: a
// timestamp-less replay arriving after the stream's duplicate window is
// stored again (the consumer's inbox is the guard from then on).
func TestReplayAfterDuplicateWindow(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	in := newIngress(t, bridge.Options{}, sc.source(t))
	const window = 300 * time.Millisecond
	if err := stream.EnsureIngress(context.Background(), in.js.JS, stream.Options{DuplicateWindow: window}); err != nil {
		t.Fatal(err)
	}
	h, body, _ := sc.sample("evt-late")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	wantCode(t, in.post(t, sc.name, h, body), http.StatusAccepted)
	a := in.post(t, sc.name, h, body)
	if a.code != http.StatusOK || !strings.Contains(string(a.raw), "duplicate") {
		t.Fatalf("replay inside the window: answer %d %s, want 200 duplicate", a.code, a.raw)
	}
	time.Sleep(window)
	// The server forgets ids on a timer; until it has, a replay is still
	// a duplicate and stores nothing.
	deadline := time.Now().Add(time.Minute)
	for {
		a := in.post(t, sc.name, h, body)
		if a.code == http.StatusAccepted {
			break
		}
		if a.code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("replay after the window: answer %d %s, want 202 within a minute", a.code, a.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantMsgs(t, in, 2)
}
