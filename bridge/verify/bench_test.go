package verify

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// BenchmarkVerify measures one successful verification of a 1 KiB body
// per scheme, each with two active secrets (a rotation in progress, the
// usual worst case: every secret's MAC is computed).
func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB
	now := unix(1_700_000_000)
	ts := strconv.FormatInt(now.Unix(), 10)
	const secret = "bench-secret"
	stdSecret := "whsec_YmVuY2gtc2VjcmV0LWJlbmNoLXNlY3JldA=="
	stdSig, err := SignStandard(stdSecret, "msg_1", now, body)
	if err != nil {
		b.Fatal(err)
	}
	hcfg := HMACConfig{Header: "X-Signature", Prefix: "sha256=", TimestampHeader: "X-Timestamp"}
	hsig, err := SignHMAC(secret, hcfg, now, body)
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		scheme  string
		secrets []string
		opts    Options
		h       http.Header
	}{
		{SchemeStandardWebhooks, []string{"whsec_b2xkLXNlY3JldA==", stdSecret}, Options{},
			hdr(StandardHeaderID, "msg_1", StandardHeaderTimestamp, ts, StandardHeaderSignature, stdSig)},
		{SchemeGitHub, []string{"old", secret}, Options{}, hdr(GitHubHeaderSignature, SignGitHub(secret, body))},
		{SchemeStripe, []string{"old", secret}, Options{}, hdr(StripeHeaderSignature, SignStripe(secret, now, body))},
		{SchemeShopify, []string{"old", secret}, Options{}, hdr(ShopifyHeaderHMAC, SignShopify(secret, body))},
		{SchemeSlack, []string{"old", secret}, Options{},
			hdr(SlackHeaderTimestamp, ts, SlackHeaderSignature, SignSlack(secret, now, body))},
		{SchemeHMAC, []string{"old", secret}, Options{HMAC: hcfg}, hdr("X-Signature", hsig, "X-Timestamp", ts)},
	}
	for _, c := range cases {
		v, err := New(c.scheme, c.secrets, c.opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := v.Verify(c.h, body, now); err != nil {
			b.Fatalf("%s: %v", c.scheme, err)
		}
		b.Run(c.scheme, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Verify(c.h, body, now.Add(time.Second)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
