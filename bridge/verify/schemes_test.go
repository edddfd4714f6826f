package verify

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// otherSecret is a second, unrelated secret for wrong-secret and rotation
// cases. For Standard Webhooks it is valid base64 (the whsec_ form).
const otherSecret = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="

var sentinels = []error{ErrMissingSignature, ErrMalformedSignature, ErrBadSignature, ErrStaleTimestamp}

// check is one Verify call and its expected outcome: want nil means the
// delivery must pass, otherwise err must wrap exactly want and Reason must
// give reason.
type check struct {
	name   string
	v      Verifier
	h      http.Header
	body   string
	now    time.Time
	want   error
	reason string
}

func runChecks(t *testing.T, secrets []string, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			err := c.v.Verify(c.h, []byte(c.body), c.now)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want success", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify = nil, want %v", c.want)
			}
			for _, s := range sentinels {
				if got, want := errors.Is(err, s), s == c.want; got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, want)
				}
			}
			if got := Reason(err); got != c.reason {
				t.Errorf("Reason(%v) = %q, want %q", err, got, c.reason)
			}
			msg := err.Error()
			for _, s := range secrets {
				if strings.Contains(msg, s) || strings.Contains(msg, strings.TrimPrefix(s, "whsec_")) {
					t.Errorf("error %q leaks a secret", msg)
				}
			}
			if len(c.body) >= 8 && strings.Contains(msg, c.body) {
				t.Errorf("error %q leaks the body", msg)
			}
		})
	}
}

func mustNew(t *testing.T, scheme string, secrets []string, opts Options) Verifier {
	t.Helper()
	v, err := New(scheme, secrets, opts)
	if err != nil {
		t.Fatalf("New(%q): %v", scheme, err)
	}
	return v
}

// flip replaces the last character of s with alt (or the next character
// if it already is alt), keeping a hex signature well-formed.
func flip(s string, alt byte) string {
	return flipAt(s, len(s)-1, alt)
}

// flipAt is flip at index i.
func flipAt(s string, i int, alt byte) string {
	b := []byte(s)
	if b[i] == alt {
		alt++
	}
	b[i] = alt
	return string(b)
}

func TestStandardWebhooks(t *testing.T) {
	v := mustNew(t, SchemeStandardWebhooks, []string{swSecret}, Options{})
	rot := mustNew(t, SchemeStandardWebhooks, []string{otherSecret, swSecret}, Options{})
	wrong := mustNew(t, SchemeStandardWebhooks, []string{otherSecret}, Options{})
	ts := "1614265330"
	at := unix(swTS)
	h := func(id, ts, sig string) http.Header {
		return hdr(StandardHeaderID, id, StandardHeaderTimestamp, ts, StandardHeaderSignature, sig)
	}
	otherSig, err := SignStandard(otherSecret, swID, at, []byte(swBody))
	if err != nil {
		t.Fatal(err)
	}
	far := unix(999_999_999_999_999_999)
	farSig, _ := SignStandard(swSecret, swID, far, []byte(swBody))
	// The vector's signature with the last base64 character's unused
	// padding bits set ("1OE=" -> "1OF="): Go's lenient decoder reads the
	// same bytes.
	nonCanonical := strings.TrimSuffix(swSig, "E=") + "F="

	runChecks(t, []string{swSecret, otherSecret}, []check{
		{"vector", v, h(swID, ts, swSig), swBody, at.Add(time.Minute), nil, ""},
		{"several signatures, unknown versions ignored", v, h(swID, ts, "v2,abc v1,bm9wZQ== v1a,x "+swSig), swBody, at, nil, ""},
		{"edge of tolerance", v, h(swID, ts, swSig), swBody, at.Add(DefaultTolerance), nil, ""},
		{"rotation: old secret still accepted", rot, h(swID, ts, swSig), swBody, at, nil, ""},
		{"rotation: new secret accepted", rot, h(swID, ts, otherSig), swBody, at, nil, ""},
		{"tampered body", v, h(swID, ts, swSig), swBody + " ", at, ErrBadSignature, "mismatch"},
		{"tampered id", v, h("msg_other", ts, swSig), swBody, at, ErrBadSignature, "mismatch"},
		{"tampered signature", v, h(swID, ts, flipAt(swSig, 3, 'A')), swBody, at, ErrBadSignature, "mismatch"},
		{"wrong secret", wrong, h(swID, ts, swSig), swBody, at, ErrBadSignature, "mismatch"},
		{"stale", v, h(swID, ts, swSig), swBody, at.Add(DefaultTolerance + time.Second), ErrStaleTimestamp, "stale"},
		{"future", v, h(swID, ts, swSig), swBody, at.Add(-DefaultTolerance - time.Second), ErrStaleTimestamp, "stale"},
		{"far future does not overflow the window", v, h(swID, "999999999999999999", farSig), swBody, at, ErrStaleTimestamp, "stale"},
		{"stale and forged is a mismatch", v, h(swID, ts, flipAt(swSig, 3, 'A')), swBody, at.Add(time.Hour), ErrBadSignature, "mismatch"},
		{"missing id", v, h("", ts, swSig), swBody, at, ErrMissingSignature, "missing"},
		{"missing timestamp", v, h(swID, "", swSig), swBody, at, ErrMissingSignature, "missing"},
		{"missing signature", v, h(swID, ts, ""), swBody, at, ErrMissingSignature, "missing"},
		{"no headers", v, nil, swBody, at, ErrMissingSignature, "missing"},
		{"timestamp not a number", v, h(swID, "soon", swSig), swBody, at, ErrMalformedSignature, "malformed"},
		{"timestamp with sign", v, h(swID, "+1614265330", swSig), swBody, at, ErrMalformedSignature, "malformed"},
		{"timestamp negative", v, h(swID, "-1", swSig), swBody, at, ErrMalformedSignature, "malformed"},
		{"timestamp fractional", v, h(swID, "1614265330.0", swSig), swBody, at, ErrMalformedSignature, "malformed"},
		{"timestamp too long", v, h(swID, "1"+strings.Repeat("0", 18), swSig), swBody, at, ErrMalformedSignature, "malformed"},
		{"signature without version", v, h(swID, ts, "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="), swBody, at, ErrMalformedSignature, "malformed"},
		{"only unknown versions", v, h(swID, ts, "v2,"+swSig[3:]), swBody, at, ErrMalformedSignature, "malformed"},
		{"signature not base64", v, h(swID, ts, "v1,not*base64"), swBody, at, ErrMalformedSignature, "malformed"},
		{"signature wrong length", v, h(swID, ts, "v1,bm9wZQ=="), swBody, at, ErrMalformedSignature, "malformed"},
		{"signature non-canonical base64", v, h(swID, ts, nonCanonical), swBody, at, ErrMalformedSignature, "malformed"},
	})
}

func TestGitHub(t *testing.T) {
	v := mustNew(t, SchemeGitHub, []string{ghSecret}, Options{})
	rot := mustNew(t, SchemeGitHub, []string{"old-secret", ghSecret}, Options{})
	wrong := mustNew(t, SchemeGitHub, []string{"not " + ghSecret}, Options{})
	now := unix(0) // GitHub signs no timestamp; now must not matter
	h := func(sig string) http.Header { return hdr(GitHubHeaderSignature, sig) }
	runChecks(t, []string{ghSecret}, []check{
		{"vector", v, h(ghSig), ghBody, now, nil, ""},
		{"upper-case hex", v, h("sha256=" + strings.ToUpper(ghSig[7:])), ghBody, now, nil, ""},
		{"any now", v, h(ghSig), ghBody, time.Now().Add(1000 * time.Hour), nil, ""},
		{"rotation: second secret", rot, h(ghSig), ghBody, now, nil, ""},
		{"rotation: first secret", rot, h(SignGitHub("old-secret", []byte(ghBody))), ghBody, now, nil, ""},
		{"tampered body", v, h(ghSig), "Hello, World?", now, ErrBadSignature, "mismatch"},
		{"empty body", v, h(ghSig), "", now, ErrBadSignature, "mismatch"},
		{"tampered signature", v, h(flip(ghSig, '0')), ghBody, now, ErrBadSignature, "mismatch"},
		{"wrong secret", wrong, h(ghSig), ghBody, now, ErrBadSignature, "mismatch"},
		{"missing", v, http.Header{}, ghBody, now, ErrMissingSignature, "missing"},
		{"legacy sha1 header only", v, hdr("X-Hub-Signature", "sha1=0123"), ghBody, now, ErrMissingSignature, "missing"},
		{"no prefix", v, h(ghSig[7:]), ghBody, now, ErrMalformedSignature, "malformed"},
		{"sha1 prefix", v, h("sha1=" + ghSig[7:]), ghBody, now, ErrMalformedSignature, "malformed"},
		{"not hex", v, h("sha256=" + strings.Repeat("zz", 32)), ghBody, now, ErrMalformedSignature, "malformed"},
		{"short", v, h(ghSig[:len(ghSig)-2]), ghBody, now, ErrMalformedSignature, "malformed"},
		{"prefix only", v, h("sha256="), ghBody, now, ErrMalformedSignature, "malformed"},
	})
}

func TestStripe(t *testing.T) {
	v := mustNew(t, SchemeStripe, []string{stSecret}, Options{})
	rot := mustNew(t, SchemeStripe, []string{"whsec_old", stSecret}, Options{})
	wrong := mustNew(t, SchemeStripe, []string{"whsec_other"}, Options{})
	at := unix(stTS)
	v1 := stSig[len("t=1533204620,v1="):][:64]
	h := func(sig string) http.Header { return hdr(StripeHeaderSignature, sig) }
	oldSig := SignStripe("whsec_old", at, []byte(stBody))
	runChecks(t, []string{stSecret, "whsec_old", "whsec_other"}, []check{
		{"vector", v, h(stSig), stBody, at.Add(100 * time.Second), nil, ""},
		{"edge of tolerance (300 s)", v, h(stSig), stBody, at.Add(300 * time.Second), nil, ""},
		{"several v1, one good", v, h("t=1533204620,v1=" + strings.Repeat("ab", 32) + ",v1=" + v1), stBody, at, nil, ""},
		{"unreadable v1 beside a good one", v, h(stSig + ",v1=bad_signature"), stBody, at, nil, ""},
		{"unknown schemes ignored", v, h("v9=x,t=1533204620,v1=" + v1 + ",foo=bar"), stBody, at, nil, ""},
		{"rotation: Stripe's rolled header, new secret", rot, h(oldSig + ",v1=" + v1), stBody, at, nil, ""},
		{"rotation: old secret", rot, h(oldSig), stBody, at, nil, ""},
		{"tampered body", v, h(stSig), stBody + "this_changes_the_json", at, ErrBadSignature, "mismatch"},
		{"tampered timestamp", v, h("t=1533204621,v1=" + v1), stBody, at, ErrBadSignature, "mismatch"},
		{"tampered signature", v, h("t=1533204620,v1=" + flip(v1, '0')), stBody, at, ErrBadSignature, "mismatch"},
		{"wrong secret", wrong, h(stSig), stBody, at, ErrBadSignature, "mismatch"},
		{"v0 is not accepted as v1", v, h("t=1533204620,v1=" + stSig[len(stSig)-64:]), stBody, at, ErrBadSignature, "mismatch"},
		{"stale", v, h(stSig), stBody, at.Add(301 * time.Second), ErrStaleTimestamp, "stale"},
		{"future", v, h(stSig), stBody, at.Add(-301 * time.Second), ErrStaleTimestamp, "stale"},
		{"missing", v, http.Header{}, stBody, at, ErrMissingSignature, "missing"},
		{"only v0", v, h("t=1533204620,v0=" + v1), stBody, at, ErrMalformedSignature, "malformed"},
		{"no timestamp", v, h("v1=" + v1), stBody, at, ErrMalformedSignature, "malformed"},
		{"two timestamps", v, h("t=1533204620,t=1,v1=" + v1), stBody, at, ErrMalformedSignature, "malformed"},
		{"timestamp not a number", v, h("t=now,v1=" + v1), stBody, at, ErrMalformedSignature, "malformed"},
		// Header values stripe-dotnet's own tests reject
		// (ValidateSignatureHandlesIncorrectHeaderValues) and stripe-go's.
		{"empty t", v, h("t=,v1=" + v1), stBody, at, ErrMalformedSignature, "malformed"},
		{"t,v1=,v0=", v, h("t,v1=,v0="), stBody, at, ErrMalformedSignature, "malformed"},
		{"t,,", v, h("t,,"), stBody, at, ErrMalformedSignature, "malformed"},
		{",,", v, h(",,"), stBody, at, ErrMalformedSignature, "malformed"},
		{"t", v, h("t"), stBody, at, ErrMalformedSignature, "malformed"},
		{"v1,t=1", v, h("v1,t=1"), stBody, at, ErrMalformedSignature, "malformed"},
	})
}

func TestShopify(t *testing.T) {
	v := mustNew(t, SchemeShopify, []string{spSecret}, Options{})
	rot := mustNew(t, SchemeShopify, []string{"new_secret_key", spSecret}, Options{})
	wrong := mustNew(t, SchemeShopify, []string{"other_secret_key"}, Options{})
	now := unix(0)
	h := func(sig string) http.Header { return hdr(ShopifyHeaderHMAC, sig) }
	runChecks(t, []string{spSecret, "new_secret_key"}, []check{
		{"vector", v, h(spSig), spBody, now, nil, ""},
		{"rotation: second secret", rot, h(spSig), spBody, now, nil, ""},
		{"rotation: first secret", rot, h(SignShopify("new_secret_key", []byte(spBody))), spBody, now, nil, ""},
		{"tampered body", v, h(spSig), `{"foo": "baz"}`, now, ErrBadSignature, "mismatch"},
		{"tampered signature", v, h("A" + spSig[1:]), spBody, now, ErrBadSignature, "mismatch"},
		{"wrong secret", wrong, h(spSig), spBody, now, ErrBadSignature, "mismatch"},
		{"missing", v, http.Header{}, spBody, now, ErrMissingSignature, "missing"},
		{"hex instead of base64", v, h(strings.Repeat("ab", 32)), spBody, now, ErrMalformedSignature, "malformed"},
		{"not base64", v, h("B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7*="), spBody, now, ErrMalformedSignature, "malformed"},
		{"unpadded", v, h(strings.TrimSuffix(spSig, "=")), spBody, now, ErrMalformedSignature, "malformed"},
		{"non-canonical padding bits", v, h("B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7h="), spBody, now, ErrMalformedSignature, "malformed"},
		{"url alphabet", v, h(strings.NewReplacer("+", "-", "/", "_").Replace("+/" + spSig[2:])), spBody, now, ErrMalformedSignature, "malformed"},
		{"too short", v, h("Zm9v"), spBody, now, ErrMalformedSignature, "malformed"},
	})
}

func TestSlack(t *testing.T) {
	v := mustNew(t, SchemeSlack, []string{slSecret}, Options{})
	rot := mustNew(t, SchemeSlack, []string{"new-signing-secret", slSecret}, Options{})
	wrong := mustNew(t, SchemeSlack, []string{"other-signing-secret"}, Options{})
	at := unix(slTS)
	ts := "1531420618"
	h := func(ts, sig string) http.Header {
		return hdr(SlackHeaderTimestamp, ts, SlackHeaderSignature, sig)
	}
	runChecks(t, []string{slSecret, "new-signing-secret"}, []check{
		{"vector", v, h(ts, slSig), slBody, at.Add(time.Minute), nil, ""},
		{"edge of tolerance (5 min)", v, h(ts, slSig), slBody, at.Add(-5 * time.Minute), nil, ""},
		{"rotation: second secret", rot, h(ts, slSig), slBody, at, nil, ""},
		{"rotation: first secret", rot, h(ts, SignSlack("new-signing-secret", at, []byte(slBody))), slBody, at, nil, ""},
		{"tampered body", v, h(ts, slSig), slBody + "&x=1", at, ErrBadSignature, "mismatch"},
		{"tampered timestamp", v, h("1531420619", slSig), slBody, at, ErrBadSignature, "mismatch"},
		{"tampered signature", v, h(ts, flip(slSig, '0')), slBody, at, ErrBadSignature, "mismatch"},
		{"wrong secret", wrong, h(ts, slSig), slBody, at, ErrBadSignature, "mismatch"},
		{"stale", v, h(ts, slSig), slBody, at.Add(5*time.Minute + time.Second), ErrStaleTimestamp, "stale"},
		{"future", v, h(ts, slSig), slBody, at.Add(-5*time.Minute - time.Second), ErrStaleTimestamp, "stale"},
		{"missing timestamp", v, h("", slSig), slBody, at, ErrMissingSignature, "missing"},
		{"missing signature", v, h(ts, ""), slBody, at, ErrMissingSignature, "missing"},
		{"timestamp not a number", v, h("1531420618.5", slSig), slBody, at, ErrMalformedSignature, "malformed"},
		{"no v0= prefix", v, h(ts, slSig[3:]), slBody, at, ErrMalformedSignature, "malformed"},
		{"other version", v, h(ts, "v1="+slSig[3:]), slBody, at, ErrMalformedSignature, "malformed"},
		{"not hex", v, h(ts, "v0="+strings.Repeat("g", 64)), slBody, at, ErrMalformedSignature, "malformed"},
		{"short", v, h(ts, slSig[:20]), slBody, at, ErrMalformedSignature, "malformed"},
	})
}

func TestHMAC(t *testing.T) {
	cfg := HMACConfig{Header: "X-Signature", Prefix: "sha512=", Encoding: "base64", Algorithm: "sha512", TimestampHeader: "X-Timestamp", Tolerance: time.Minute}
	const secret = "generic-secret"
	v := mustNew(t, SchemeHMAC, []string{secret}, Options{HMAC: cfg})
	rot := mustNew(t, SchemeHMAC, []string{"next-secret", secret}, Options{HMAC: cfg})
	wrong := mustNew(t, SchemeHMAC, []string{"other-secret"}, Options{HMAC: cfg})
	plain := mustNew(t, SchemeHMAC, []string{rfcKey}, Options{HMAC: HMACConfig{Header: "X-Sig", Algorithm: "SHA512"}})
	at := unix(1_700_000_000)
	ts := "1700000000"
	body := `{"event":"ping"}`
	sig, err := SignHMAC(secret, cfg, at, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	nextSig, _ := SignHMAC("next-secret", cfg, at, []byte(body))
	h := func(ts, sig string) http.Header { return hdr("X-Timestamp", ts, "X-Signature", sig) }
	runChecks(t, []string{secret, "next-secret", rfcKey}, []check{
		{"signed", v, h(ts, sig), body, at.Add(30 * time.Second), nil, ""},
		{"rfc4231 without timestamp", plain, hdr("X-Sig", rfcSHA512), rfcData, unix(0), nil, ""},
		{"rotation: second secret", rot, h(ts, sig), body, at, nil, ""},
		{"rotation: first secret", rot, h(ts, nextSig), body, at, nil, ""},
		{"tampered body", v, h(ts, sig), body + " ", at, ErrBadSignature, "mismatch"},
		{"tampered timestamp", v, h("1700000001", sig), body, at, ErrBadSignature, "mismatch"},
		{"tampered signature", v, h(ts, "sha512=A"+sig[8:]), body, at, ErrBadSignature, "mismatch"},
		{"wrong secret", wrong, h(ts, sig), body, at, ErrBadSignature, "mismatch"},
		{"rfc4231 tampered", plain, hdr("X-Sig", flip(rfcSHA512, '0')), rfcData, unix(0), ErrBadSignature, "mismatch"},
		{"stale", v, h(ts, sig), body, at.Add(61 * time.Second), ErrStaleTimestamp, "stale"},
		{"future", v, h(ts, sig), body, at.Add(-61 * time.Second), ErrStaleTimestamp, "stale"},
		{"missing signature", v, h(ts, ""), body, at, ErrMissingSignature, "missing"},
		{"missing timestamp", v, h("", sig), body, at, ErrMissingSignature, "missing"},
		{"timestamp not a number", v, h("tomorrow", sig), body, at, ErrMalformedSignature, "malformed"},
		{"no prefix", v, h(ts, sig[7:]), body, at, ErrMalformedSignature, "malformed"},
		{"hex where base64 is configured", plain, hdr("X-Sig", "sha512="+rfcSHA512), rfcData, unix(0), ErrMalformedSignature, "malformed"},
		{"sha256-sized MAC for sha512", plain, hdr("X-Sig", rfcSHA512[:64]), rfcData, unix(0), ErrMalformedSignature, "malformed"},
		{"not base64", v, h(ts, "sha512=!!!"), body, at, ErrMalformedSignature, "malformed"},
	})
}
