package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSchemes: the built-in schemes are listed in their order, the
// project's own standard first and the generic hmac last (a scheme added
// later comes between them, where its rank puts it), and each builds.
func TestSchemes(t *testing.T) {
	builtIn := []string{"standard-webhooks", "github", "stripe", "shopify", "slack", "hmac"}
	got := Schemes()
	var listed []string
	for _, s := range got {
		if slices.Contains(builtIn, s) {
			listed = append(listed, s)
		}
	}
	if !slices.Equal(listed, builtIn) || got[0] != SchemeStandardWebhooks || got[len(got)-1] != SchemeHMAC {
		t.Fatalf("Schemes() = %v, want %v in this order, first and last", got, builtIn)
	}
	Schemes()[0] = "mutated"
	if Schemes()[0] != SchemeStandardWebhooks {
		t.Fatal("Schemes() shares its backing array")
	}
	for _, s := range Schemes() {
		opts := Options{}
		if s == SchemeHMAC {
			opts.HMAC = HMACConfig{Header: "X-Sig"}
		}
		v, err := New(s, []string{swSecret}, opts)
		if err != nil || v == nil {
			t.Errorf("New(%q) = %v, %v", s, v, err)
		}
	}
}

func TestNewErrors(t *testing.T) {
	cases := []struct {
		name    string
		scheme  string
		secrets []string
		opts    Options
		inErr   string
	}{
		{"unknown scheme", "gitlab", []string{"s"}, Options{}, "unknown scheme"},
		{"empty scheme", "", []string{"s"}, Options{}, "unknown scheme"},
		{"no secrets github", SchemeGitHub, nil, Options{}, "no secret"},
		{"no secrets standard", SchemeStandardWebhooks, []string{}, Options{}, "no secret"},
		{"empty secret stripe", SchemeStripe, []string{"whsec_a", ""}, Options{}, "secret #2 is empty"},
		{"empty secret shopify", SchemeShopify, []string{""}, Options{}, "secret #1 is empty"},
		{"empty secret slack", SchemeSlack, []string{""}, Options{}, "secret #1 is empty"},
		{"empty secret hmac", SchemeHMAC, []string{""}, Options{HMAC: HMACConfig{Header: "X-Sig"}}, "secret #1 is empty"},
		{"negative tolerance", SchemeStripe, []string{"s"}, Options{Tolerance: -time.Second}, "Tolerance"},
		{"hmac options on a named scheme", SchemeGitHub, []string{"s"}, Options{HMAC: HMACConfig{Header: "X-Sig"}}, "HMAC options"},
		{"hmac without header", SchemeHMAC, []string{"s"}, Options{}, "Header is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := New(c.scheme, c.secrets, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.inErr) {
				t.Fatalf("New error = %v, want one containing %q", err, c.inErr)
			}
			// A failed New must return a nil interface, not a typed nil.
			if v != nil {
				t.Fatalf("New returned non-nil Verifier %#v with an error", v)
			}
		})
	}
	if _, err := New("nope", nil, Options{}); !strings.Contains(err.Error(), strings.Join(Schemes(), ", ")) {
		t.Errorf("unknown-scheme error %q does not list the known schemes", err)
	}
}

func TestNewTolerance(t *testing.T) {
	body := []byte("{}")
	at := unix(1_700_000_000)
	sig := SignStripe("whsec_x", at, body)
	v, err := New(SchemeStripe, []string{"whsec_x"}, Options{Tolerance: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(hdr(StripeHeaderSignature, sig), body, at.Add(59*time.Minute)); err != nil {
		t.Errorf("Options.Tolerance not applied: %v", err)
	}
	// The general tolerance reaches a timestamped hmac config...
	cfg := HMACConfig{Header: "X-Sig", TimestampHeader: "X-Ts"}
	hsig, _ := SignHMAC("k", cfg, at, body)
	v, err = New(SchemeHMAC, []string{"k"}, Options{Tolerance: time.Hour, HMAC: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(hdr("X-Sig", hsig, "X-Ts", "1700000000"), body, at.Add(59*time.Minute)); err != nil {
		t.Errorf("Options.Tolerance not applied to hmac: %v", err)
	}
	// ...and is ignored, like for github, by one that signs no timestamp.
	if _, err := New(SchemeHMAC, []string{"k"}, Options{Tolerance: time.Hour, HMAC: HMACConfig{Header: "X-Sig"}}); err != nil {
		t.Errorf("general Tolerance refused for timestamp-less hmac: %v", err)
	}
	if _, err := New(SchemeGitHub, []string{"k"}, Options{Tolerance: time.Hour}); err != nil {
		t.Errorf("general Tolerance refused for github: %v", err)
	}
}

func TestHMACConfigValidation(t *testing.T) {
	cases := []struct {
		name  string
		cfg   HMACConfig
		field string
	}{
		{"no header", HMACConfig{}, "Header is required"},
		{"header with space", HMACConfig{Header: "X Sig"}, "Header \"X Sig\" is not a valid header name"},
		{"header with colon", HMACConfig{Header: "X-Sig:"}, "Header"},
		{"bad encoding", HMACConfig{Header: "X-Sig", Encoding: "base32"}, "Encoding \"base32\""},
		{"bad algorithm", HMACConfig{Header: "X-Sig", Algorithm: "sha1"}, "Algorithm \"sha1\""},
		{"negative tolerance", HMACConfig{Header: "X-Sig", TimestampHeader: "X-Ts", Tolerance: -1}, "Tolerance"},
		{"tolerance without timestamp", HMACConfig{Header: "X-Sig", Tolerance: time.Minute}, "Tolerance is set but TimestampHeader is empty"},
		{"bad timestamp header", HMACConfig{Header: "X-Sig", TimestampHeader: "X\nTs"}, "TimestampHeader"},
		{"timestamp header is the signature header", HMACConfig{Header: "X-Sig", TimestampHeader: "x-sig"}, "TimestampHeader is the same header as Header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewHMAC([]string{"k"}, c.cfg); err == nil || !strings.Contains(err.Error(), c.field) {
				t.Errorf("NewHMAC error = %v, want one containing %q", err, c.field)
			}
			if _, err := SignHMAC("k", c.cfg, time.Time{}, nil); err == nil {
				t.Error("SignHMAC accepted an invalid config")
			}
		})
	}
	ok := []HMACConfig{
		{Header: "X-Sig"},
		{Header: "x-sig", Encoding: "HEX", Algorithm: "SHA256"},
		{Header: "X-Sig", Encoding: "base64", Algorithm: "sha512", Prefix: "v1=", TimestampHeader: "X-Ts", Tolerance: time.Second},
	}
	for _, cfg := range ok {
		if _, err := NewHMAC([]string{"k"}, cfg); err != nil {
			t.Errorf("NewHMAC(%+v): %v", cfg, err)
		}
	}
}

// TestStandardSecrets pins the secret-reading rule of NewStandardWebhooks.
func TestStandardSecrets(t *testing.T) {
	at := unix(swTS)
	body := []byte(swBody)
	// sigWithKey signs independently of standardKey, to check which key a
	// configured secret turned into.
	sigWithKey := func(key []byte) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(swID + ".1614265330." + swBody))
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	verifies := func(secret, sig string) error {
		v, err := NewStandardWebhooks([]string{secret}, 0)
		if err != nil {
			return err
		}
		return v.Verify(hdr(StandardHeaderID, swID, StandardHeaderTimestamp, "1614265330", StandardHeaderSignature, sig), body, at)
	}
	vectorKey, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")

	t.Run("whsec_ prefix is base64", func(t *testing.T) {
		if err := verifies(swSecret, sigWithKey(vectorKey)); err != nil {
			t.Error(err)
		}
	})
	t.Run("bare base64 is decoded", func(t *testing.T) {
		if err := verifies("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", swSig); err != nil {
			t.Error(err)
		}
	})
	t.Run("raw text that is not base64 is used as bytes", func(t *testing.T) {
		for _, raw := range []string{"plain-text-key", "It's a Secret to Everybody", "abc"} {
			if err := verifies(raw, sigWithKey([]byte(raw))); err != nil {
				t.Errorf("%q: %v", raw, err)
			}
			got, err := SignStandard(raw, swID, at, body)
			if err != nil || got != sigWithKey([]byte(raw)) {
				t.Errorf("SignStandard(%q) = %q, %v", raw, got, err)
			}
		}
	})
	t.Run("raw text that is valid base64 is decoded", func(t *testing.T) {
		key, _ := base64.StdEncoding.DecodeString("abcd1234")
		if err := verifies("abcd1234", sigWithKey(key)); err != nil {
			t.Error(err)
		}
		if err := verifies("abcd1234", sigWithKey([]byte("abcd1234"))); err == nil {
			t.Error("base64-looking secret was used raw")
		}
	})
	for _, bad := range []string{"whsec_not base64!", "whsec_", "whsec_abc", ""} {
		t.Run("refused "+bad, func(t *testing.T) {
			_, err := NewStandardWebhooks([]string{swSecret, bad}, 0)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "secret #2") {
				t.Errorf("error %q does not say which secret", err)
			}
			if rest := strings.TrimPrefix(bad, "whsec_"); rest != "" && strings.Contains(err.Error(), rest) {
				t.Errorf("error %q echoes the secret", err)
			}
			if _, err := SignStandard(bad, swID, at, body); err == nil {
				t.Error("SignStandard accepted it")
			}
		})
	}
}

func TestWithinTolerance(t *testing.T) {
	now := unix(1_700_000_000)
	tol := 5 * time.Minute
	cases := []struct {
		ts   time.Time
		want bool
	}{
		{now, true},
		{now.Add(tol), true},
		{now.Add(-tol), true},
		{now.Add(tol + time.Nanosecond), false},
		{now.Add(-tol - time.Nanosecond), false},
		// now.Sub of these saturates at the Duration limits; the old
		// |now-ts| code negated math.MinInt64 and let the first through.
		{unix(999_999_999_999_999_999), false},
		{unix(math.MaxInt64), false},
		{unix(math.MinInt64), false},
		{time.Time{}, false},
	}
	for _, c := range cases {
		if got := withinTolerance(c.ts, now, tol); got != c.want {
			t.Errorf("withinTolerance(%v) = %v, want %v", c.ts, got, c.want)
		}
	}
}

func TestParseUnix(t *testing.T) {
	good := map[string]int64{"0": 0, "1614265330": 1614265330, "000123": 123, "999999999999999999": 999999999999999999}
	for s, want := range good {
		if got, ok := parseUnix(s); !ok || got.Unix() != want {
			t.Errorf("parseUnix(%q) = %v, %v; want %d", s, got.Unix(), ok, want)
		}
	}
	for _, s := range []string{"", "+1", "-1", " 1", "1 ", "1.5", "1e9", "0x10", "１", "9999999999999999999"} {
		if _, ok := parseUnix(s); ok {
			t.Errorf("parseUnix(%q) accepted", s)
		}
	}
}
