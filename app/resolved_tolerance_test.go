package app

import (
	"errors"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// TestResolvedToleranceIsTheVerifiers: the tolerance `config check`
// prints for a source is the one its verifier applies. A scheme that
// signs a timestamp gets the default unless one is configured, and a
// delivery signed that long ago passes while one a second older is
// stale; a scheme that signs none prints 0, and a year-old delivery
// still passes.
func TestResolvedToleranceIsTheVerifiers(t *testing.T) {
	t.Parallel()
	ts := HMACConfig{Header: "X-Sig", TimestampHeader: "X-Ts"}
	cases := []struct {
		name string
		src  SourceConfig
		want time.Duration
	}{
		{"standard-webhooks", SourceConfig{Scheme: verify.SchemeStandardWebhooks}, 5 * time.Minute},
		{"github", SourceConfig{Scheme: verify.SchemeGitHub}, 0},
		{"stripe", SourceConfig{Scheme: verify.SchemeStripe}, 5 * time.Minute},
		{"stripe configured", SourceConfig{Scheme: verify.SchemeStripe, Tolerance: time.Minute}, time.Minute},
		{"shopify", SourceConfig{Scheme: verify.SchemeShopify}, 0},
		{"slack", SourceConfig{Scheme: verify.SchemeSlack}, 5 * time.Minute},
		{"hmac", SourceConfig{Scheme: verify.SchemeHMAC, HMAC: HMACConfig{Header: "X-Sig"}}, 0},
		{"hmac with a timestamp", SourceConfig{Scheme: verify.SchemeHMAC, HMAC: ts}, 5 * time.Minute},
		{"hmac with a timestamp, configured", SourceConfig{Scheme: verify.SchemeHMAC, HMAC: ts, Tolerance: 2 * time.Minute}, 2 * time.Minute},
	}
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"id":"evt-1","type":"order.created"}`)
	now := time.Unix(1_700_000_000, 0)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := c.src.resolved()
			if r.Tolerance != c.want {
				t.Fatalf("resolved tolerance %v, want %v", r.Tolerance, c.want)
			}
			if c.src.Scheme == verify.SchemeHMAC && c.src.HMAC.TimestampHeader != "" && r.HMAC.Tolerance != c.want {
				t.Errorf("resolved hmac.tolerance %v, want %v", r.HMAC.Tolerance, c.want)
			}
			c.src.secretsRead = []string{secret}
			v, err := c.src.verifier()
			if err != nil {
				t.Fatal(err)
			}
			verifyAt := func(signedAt time.Time) error {
				h, err := verify.SignHeaders(c.src.Scheme, secret, "evt-1", signedAt, body, verify.HMACConfig(c.src.HMAC))
				if err != nil {
					t.Fatal(err)
				}
				return v.Verify(h, body, now)
			}
			if c.want == 0 {
				if err := verifyAt(now.AddDate(-1, 0, 0)); err != nil {
					t.Errorf("printed tolerance 0, but a year-old delivery is refused: %v", err)
				}
				return
			}
			if err := verifyAt(now.Add(-c.want)); err != nil {
				t.Errorf("signed the printed tolerance ago: %v", err)
			}
			if err := verifyAt(now.Add(-c.want - time.Second)); !errors.Is(err, verify.ErrStaleTimestamp) {
				t.Errorf("signed a second more than the printed tolerance ago: %v, want stale", err)
			}
		})
	}
}
