package bridge_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
)

// TestEmptyBodyDeadlineDoesNotCutThePublishShort: the read deadline that
// enforces the minimum body rate must never be set on a connection that
// net/http is already reading in the background. For a request without a
// body (Content-Length: 0) that background read, which notices a client
// going away, starts before the handler runs; a rate deadline set then
// makes it time out a few seconds after the request began and cancels the
// request's context in the middle of a publish that still has
// PublishTimeout left. Shopify signs the body only, so a signed empty body
// with the id and topic in headers is a valid delivery. HOOKS appears 5 s
// after it (as after a long leader election), inside an 8 s
// PublishTimeout: it must be stored and answered 202, not 503 after ~4 s.
func TestEmptyBodyDeadlineDoesNotCutThePublishShort(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeShopify)
	in := streamsLater(t, sc, bridge.Options{PublishTimeout: 8 * time.Second}, 5*time.Second)
	h, _, _ := sc.sample("late-1")
	body := []byte{}
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	start := time.Now()
	a := in.post(t, sc.name, h, body)
	if a.code != http.StatusAccepted {
		t.Fatalf("answer %d %s after %v, want 202", a.code, a.raw, time.Since(start))
	}
	wantMsgs(t, in, 1)
}
