package verify

import (
	"net/http"
	"testing"
)

// TestRepeatedSignatureHeaders sends each scheme's signature header on two
// lines with a bad line first (signed with another secret, or garbled, or
// for Stripe a genuine but stale line): every line is considered, so the
// good second line passes; two bad lines still fail with the right reason.
func TestRepeatedSignatureHeaders(t *testing.T) {
	two := func(key, first, second string, kv ...string) http.Header {
		h := hdr(kv...)
		h.Add(key, first)
		h.Add(key, second)
		return h
	}
	ts := "1614265330"
	swOther, _ := SignStandard(otherSecret, swID, unix(swTS), []byte(swBody))
	hcfg := HMACConfig{Header: GitHubHeaderSignature, Prefix: "sha256="}
	stOld := SignStripe(stSecret, unix(stTS-3600), []byte(stBody))
	v := func(scheme, secret string, opts Options) Verifier { return mustNew(t, scheme, []string{secret}, opts) }
	sw := v(SchemeStandardWebhooks, swSecret, Options{})
	gh := v(SchemeGitHub, ghSecret, Options{})
	st := v(SchemeStripe, stSecret, Options{})
	sp := v(SchemeShopify, spSecret, Options{})
	sl := v(SchemeSlack, slSecret, Options{})
	hm := v(SchemeHMAC, ghSecret, Options{HMAC: hcfg})
	runChecks(t, nil, []check{
		{"standard: bad line first", sw, two(StandardHeaderSignature, swOther, swSig, StandardHeaderID, swID, StandardHeaderTimestamp, ts), swBody, unix(swTS), nil, ""},
		{"standard: garbled line first", sw, two(StandardHeaderSignature, "v1,***", swSig, StandardHeaderID, swID, StandardHeaderTimestamp, ts), swBody, unix(swTS), nil, ""},
		{"standard: svix set, bad line first", sw, two(SvixHeaderSignature, swOther, swSig, SvixHeaderID, swID, SvixHeaderTimestamp, ts), swBody, unix(swTS), nil, ""},
		{"standard: two bad lines", sw, two(StandardHeaderSignature, swOther, swOther, StandardHeaderID, swID, StandardHeaderTimestamp, ts), swBody, unix(swTS), ErrBadSignature, "mismatch"},
		{"github: bad line first", gh, two(GitHubHeaderSignature, SignGitHub("other", []byte(ghBody)), ghSig), ghBody, unix(0), nil, ""},
		{"github: garbled line first", gh, two(GitHubHeaderSignature, "sha1=abc", ghSig), ghBody, unix(0), nil, ""},
		{"github: two bad lines", gh, two(GitHubHeaderSignature, SignGitHub("x", []byte(ghBody)), SignGitHub("y", []byte(ghBody))), ghBody, unix(0), ErrBadSignature, "mismatch"},
		{"github: two garbled lines", gh, two(GitHubHeaderSignature, "sha1=abc", "nope"), ghBody, unix(0), ErrMalformedSignature, "malformed"},
		{"stripe: stale line first", st, two(StripeHeaderSignature, stOld, stSig), stBody, unix(stTS + 100), nil, ""},
		{"stripe: garbled line first", st, two(StripeHeaderSignature, "t=1,t=2", stSig), stBody, unix(stTS + 100), nil, ""},
		{"stripe: bad line first", st, two(StripeHeaderSignature, SignStripe("other", unix(stTS), []byte(stBody)), stSig), stBody, unix(stTS + 100), nil, ""},
		{"stripe: stale and bad lines", st, two(StripeHeaderSignature, stOld, SignStripe("other", unix(stTS), []byte(stBody))), stBody, unix(stTS + 100), ErrStaleTimestamp, "stale"},
		{"stripe: bad and garbled lines", st, two(StripeHeaderSignature, "junk", SignStripe("other", unix(stTS), []byte(stBody))), stBody, unix(stTS + 100), ErrBadSignature, "mismatch"},
		{"shopify: bad line first", sp, two(ShopifyHeaderHMAC, SignShopify("other", []byte(spBody)), spSig), spBody, unix(0), nil, ""},
		{"shopify: two bad lines", sp, two(ShopifyHeaderHMAC, SignShopify("x", []byte(spBody)), "garbled"), spBody, unix(0), ErrBadSignature, "mismatch"},
		{"slack: bad line first", sl, two(SlackHeaderSignature, SignSlack("other", unix(slTS), []byte(slBody)), slSig, SlackHeaderTimestamp, "1531420618"), slBody, unix(slTS), nil, ""},
		{"slack: two bad lines", sl, two(SlackHeaderSignature, SignSlack("x", unix(slTS), []byte(slBody)), "v0=zz", SlackHeaderTimestamp, "1531420618"), slBody, unix(slTS), ErrBadSignature, "mismatch"},
		{"hmac: bad line first", hm, two(GitHubHeaderSignature, SignGitHub("other", []byte(ghBody)), ghSig), ghBody, unix(0), nil, ""},
		{"hmac: unprefixed line first", hm, two(GitHubHeaderSignature, "abc", ghSig), ghBody, unix(0), nil, ""},
		{"hmac: two unprefixed lines", hm, two(GitHubHeaderSignature, "abc", "def"), ghBody, unix(0), ErrMalformedSignature, "malformed"},
		{"empty lines are absent", gh, two(GitHubHeaderSignature, "", ""), ghBody, unix(0), ErrMissingSignature, "missing"},
	})
}
