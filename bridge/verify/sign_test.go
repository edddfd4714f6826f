package verify_test

import (
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// Every scheme's signed headers pass that scheme's verifier, and fail it
// for another body.
func TestSignHeadersVerifyForEveryScheme(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"order.created","id":"evt-1"}`)
	now := time.Now()
	for _, scheme := range verify.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			secret, opts := "s3cret", verify.Options{}
			switch scheme {
			case verify.SchemeStandardWebhooks:
				secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
			case verify.SchemeHMAC:
				opts.HMAC = verify.HMACConfig{Header: "X-Sig", Prefix: "sha256=", TimestampHeader: "X-Ts"}
			}
			v, err := verify.New(scheme, []string{secret}, opts)
			if err != nil {
				t.Fatal(err)
			}
			h, err := verify.SignHeaders(scheme, secret, "evt-1", now, body, opts.HMAC)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Verify(h, body, now); err != nil {
				t.Fatalf("signed headers %v do not verify: %v", h, err)
			}
			if err := v.Verify(h, append(body, ' '), now); err == nil {
				t.Fatal("another body verified")
			}
		})
	}
	if _, err := verify.SignHeaders("nope", "s", "", now, body, verify.HMACConfig{}); err == nil {
		t.Fatal("unknown scheme signed")
	}
	if _, err := verify.SignHeaders(verify.SchemeGitHub, "s", "", now, body, verify.HMACConfig{Header: "X"}); err == nil {
		t.Fatal("HMAC options accepted for github")
	}
}
