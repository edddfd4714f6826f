package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The fuzz targets feed arbitrary headers and bodies to Verify with fixed
// secrets and a fixed now. Beyond "no panic" they check two properties:
//
//   - a failure always wraps one of the four sentinels (Reason is never
//     "other"), so callers can always classify it;
//   - a success is re-derived here, independently of the package's parsing
//     and decoding: some signature in the header must equal the MAC
//     computed with one of the secrets, and any timestamp must be within
//     the tolerance. Verify returning nil for anything else is a forgery.
//
// Seeds are the published vectors (valid and slightly broken) plus the
// corpus under testdata/fuzz.

const fuzzSecond = "fuzz-second-secret"

func refMAC(h func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// refTime parses a decimal timestamp the simple way; ok is false for
// anything strconv would not read as a plain unsigned number.
func refTime(s string) (time.Time, bool) {
	if s == "" || s[0] == '+' {
		return time.Time{}, false
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(n), 0), true
}

func refWithin(ts, now time.Time, tol time.Duration) bool {
	d := ts.Sub(now)
	return d <= tol && d >= -tol && ts.Year() < 1e6
}

func fuzzVerifier(f *testing.F, scheme string, secrets []string, opts Options) Verifier {
	v, err := New(scheme, secrets, opts)
	if err != nil {
		f.Fatal(err)
	}
	return v
}

func classify(t *testing.T, err error) {
	t.Helper()
	if Reason(err) == "other" {
		t.Fatalf("error wraps no sentinel: %v", err)
	}
}

func FuzzStandardWebhooks(f *testing.F) {
	v := fuzzVerifier(f, SchemeStandardWebhooks, []string{swSecret, fuzzSecond}, Options{})
	key1, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(swSecret, "whsec_"))
	key2 := []byte(fuzzSecond) // not base64, so used raw
	now := unix(swTS)
	f.Add(swID, "1614265330", swSig, []byte(swBody))
	f.Add(swID, "1614265330", "v2,x v1,bm9wZQ== "+swSig, []byte(swBody))
	f.Add(swID, "1614265330", strings.TrimSuffix(swSig, "E=")+"F=", []byte(swBody))
	f.Add(swID, "999999999999999999", swSig, []byte(swBody))
	f.Add("", "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{StandardHeaderID: {id}, StandardHeaderTimestamp: {ts}, StandardHeaderSignature: {sig}}
		err := v.Verify(h, body, now)
		if err != nil {
			classify(t, err)
			return
		}
		at, ok := refTime(ts)
		if !ok || !refWithin(at, now, DefaultTolerance) {
			t.Fatalf("accepted timestamp %q", ts)
		}
		for _, key := range [][]byte{key1, key2} {
			want := "v1," + base64.StdEncoding.EncodeToString(refMAC(sha256.New, key, []byte(id+"."+ts+"."), body))
			for _, e := range strings.Fields(sig) {
				if e == want {
					return
				}
			}
		}
		t.Fatalf("accepted id=%q ts=%q sig=%q without a matching signature", id, ts, sig)
	})
}

func FuzzGitHub(f *testing.F) {
	v := fuzzVerifier(f, SchemeGitHub, []string{ghSecret, fuzzSecond}, Options{})
	f.Add(ghSig, []byte(ghBody))
	f.Add(strings.ToUpper(ghSig), []byte(ghBody))
	f.Add("sha256="+strings.ToUpper(ghSig[7:]), []byte(ghBody))
	f.Add("sha1=abc", []byte(""))
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(http.Header{GitHubHeaderSignature: {sig}}, body, time.Time{})
		if err != nil {
			classify(t, err)
			return
		}
		for _, key := range []string{ghSecret, fuzzSecond} {
			if strings.EqualFold(sig, "sha256="+hex.EncodeToString(refMAC(sha256.New, []byte(key), body))) && strings.HasPrefix(sig, "sha256=") {
				return
			}
		}
		t.Fatalf("accepted %q without a matching signature", sig)
	})
}

func FuzzStripe(f *testing.F) {
	v := fuzzVerifier(f, SchemeStripe, []string{stSecret, fuzzSecond}, Options{})
	now := unix(stTS)
	f.Add(stSig, []byte(stBody))
	f.Add(stSig+",v1=bad,t=1", []byte(stBody))
	f.Add("t=1533204620,v0="+stSig[len(stSig)-64:], []byte(stBody))
	f.Add("t,v1=,v0=", []byte("{}"))
	f.Add(",,", []byte(nil))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := v.Verify(http.Header{StripeHeaderSignature: {header}}, body, now)
		if err != nil {
			classify(t, err)
			return
		}
		var ts string
		var v1 []string
		for _, item := range strings.Split(header, ",") {
			k, val, _ := strings.Cut(item, "=")
			switch k {
			case "t":
				if ts != "" {
					t.Fatalf("accepted two timestamps in %q", header)
				}
				ts = val
			case "v1":
				v1 = append(v1, val)
			}
		}
		at, ok := refTime(ts)
		if !ok || !refWithin(at, now, DefaultTolerance) {
			t.Fatalf("accepted timestamp %q", ts)
		}
		for _, key := range []string{stSecret, fuzzSecond} {
			want := hex.EncodeToString(refMAC(sha256.New, []byte(key), []byte(ts+"."), body))
			for _, s := range v1 {
				if strings.EqualFold(s, want) {
					return
				}
			}
		}
		t.Fatalf("accepted %q without a matching v1 signature", header)
	})
}

func FuzzShopify(f *testing.F) {
	v := fuzzVerifier(f, SchemeShopify, []string{spSecret, fuzzSecond}, Options{})
	f.Add(spSig, []byte(spBody))
	f.Add("B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7h=", []byte(spBody))
	f.Add("B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7g", []byte(spBody))
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(http.Header{ShopifyHeaderHMAC: {sig}}, body, time.Time{})
		if err != nil {
			classify(t, err)
			return
		}
		for _, key := range []string{spSecret, fuzzSecond} {
			if sig == base64.StdEncoding.EncodeToString(refMAC(sha256.New, []byte(key), body)) {
				return
			}
		}
		t.Fatalf("accepted %q without a matching signature", sig)
	})
}

func FuzzSlack(f *testing.F) {
	v := fuzzVerifier(f, SchemeSlack, []string{slSecret, fuzzSecond}, Options{})
	now := unix(slTS)
	f.Add("1531420618", slSig, []byte(slBody))
	f.Add("1531420618", "v0="+strings.ToUpper(slSig[3:]), []byte(slBody))
	f.Add("1531420618.0", slSig, []byte(slBody))
	f.Add("", "v0=", []byte(nil))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		err := v.Verify(http.Header{SlackHeaderTimestamp: {ts}, SlackHeaderSignature: {sig}}, body, now)
		if err != nil {
			classify(t, err)
			return
		}
		at, ok := refTime(ts)
		if !ok || !refWithin(at, now, DefaultTolerance) {
			t.Fatalf("accepted timestamp %q", ts)
		}
		for _, key := range []string{slSecret, fuzzSecond} {
			want := "v0=" + hex.EncodeToString(refMAC(sha256.New, []byte(key), []byte("v0:"+ts+":"), body))
			if strings.HasPrefix(sig, "v0=") && strings.EqualFold(sig, want) {
				return
			}
		}
		t.Fatalf("accepted ts=%q sig=%q without a matching signature", ts, sig)
	})
}

// fuzzHMACConfigs are the generic configurations FuzzHMAC picks from.
var fuzzHMACConfigs = []HMACConfig{
	{Header: "X-Sig"},
	{Header: "X-Sig", Prefix: "sha512=", Encoding: "base64", Algorithm: "sha512"},
	{Header: "X-Sig", Prefix: "v1=", TimestampHeader: "X-Ts"},
	{Header: "X-Sig", Encoding: "base64", Algorithm: "sha512", TimestampHeader: "X-Ts", Tolerance: time.Minute},
}

func FuzzHMAC(f *testing.F) {
	var vs []Verifier
	for _, cfg := range fuzzHMACConfigs {
		vs = append(vs, fuzzVerifier(f, SchemeHMAC, []string{rfcKey, fuzzSecond}, Options{HMAC: cfg}))
	}
	now := unix(1_700_000_000)
	for i, cfg := range fuzzHMACConfigs {
		sig, err := SignHMAC(rfcKey, cfg, now, []byte(rfcData))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), "1700000000", sig, []byte(rfcData))
		f.Add(uint8(i), "1700000000", cfg.Prefix+"00", []byte(rfcData))
	}
	f.Add(uint8(0), "", rfcSHA512, []byte(rfcData))
	f.Fuzz(func(t *testing.T, sel uint8, ts, sig string, body []byte) {
		i := int(sel) % len(fuzzHMACConfigs)
		cfg := fuzzHMACConfigs[i]
		h := http.Header{"X-Sig": {sig}, "X-Ts": {ts}}
		err := vs[i].Verify(h, body, now)
		if err != nil {
			classify(t, err)
			return
		}
		newHash := sha256.New
		if cfg.Algorithm == "sha512" {
			newHash = sha512.New
		}
		content := body
		if cfg.TimestampHeader != "" {
			at, ok := refTime(ts)
			tol := cfg.Tolerance
			if tol == 0 {
				tol = DefaultTolerance
			}
			if !ok || !refWithin(at, now, tol) {
				t.Fatalf("accepted timestamp %q", ts)
			}
			content = append([]byte(ts+"."), body...)
		}
		for _, key := range []string{rfcKey, fuzzSecond} {
			mac := refMAC(newHash, []byte(key), content)
			rest, ok := strings.CutPrefix(sig, cfg.Prefix)
			if !ok {
				break
			}
			if cfg.Encoding == "base64" && rest == base64.StdEncoding.EncodeToString(mac) ||
				cfg.Encoding == "" && strings.EqualFold(rest, hex.EncodeToString(mac)) {
				return
			}
		}
		t.Fatalf("config %d accepted ts=%q sig=%q without a matching signature", i, ts, sig)
	})
}

// FuzzNew throws arbitrary configuration at the factory: it must never
// panic, must return either a usable verifier or an error (never both,
// never a typed nil), and its errors must not echo the secret. The secret
// ends in a NUL byte, which an error can only contain if the secret was
// copied in raw: configuration values are echoed with %q, which escapes it.
func FuzzNew(f *testing.F) {
	f.Add("hmac", "X-Sig", "sha256=", "hex", "sha256", "X-Ts", int64(60), "s3cr3t-value")
	f.Add("hmac", "X Sig", "", "base32", "md5", "X-Sig", int64(-1), "s3cr3t-value")
	f.Add("standard-webhooks", "", "", "", "", "", int64(0), "whsec_%%%")
	f.Add("standard-webhooks", "", "", "", "", "", int64(0), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	f.Add("stripe", "", "", "", "", "", int64(300), "")
	f.Add("github", "X-Sig", "", "", "", "", int64(0), "s3cr3t-value")
	f.Fuzz(func(t *testing.T, scheme, header, prefix, enc, alg, tsHeader string, tolSec int64, secret string) {
		secret += "\x00"
		opts := Options{Tolerance: time.Duration(tolSec) * time.Second}
		if scheme == SchemeHMAC {
			opts.HMAC = HMACConfig{Header: header, Prefix: prefix, Encoding: enc, Algorithm: alg, TimestampHeader: tsHeader}
		}
		v, err := New(scheme, []string{secret}, opts)
		if err != nil {
			if v != nil {
				t.Fatalf("verifier %#v returned with error %v", v, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q echoes the secret", err)
			}
			return
		}
		if v == nil {
			t.Fatal("nil verifier without error")
		}
		if err := v.Verify(http.Header{}, nil, time.Unix(0, 0)); Reason(err) != "missing" {
			t.Fatalf("Verify with no headers = %v, want a missing signature", err)
		}
	})
}
