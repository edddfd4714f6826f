package verify

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// schemeConfigs are the configurations each scheme is checked with: the
// zero one, unless the scheme needs its own (hmac, with and without a
// signed timestamp). A new scheme that needs configuration adds it here.
var schemeConfigs = map[string][]HMACConfig{
	SchemeHMAC: {
		{Header: "X-Sig", Prefix: "sha256=", TimestampHeader: "X-Ts"},
		{Header: "X-Sig", Encoding: "base64", Algorithm: "sha512"},
	},
}

// TestEverySchemeIsComplete checks every registered descriptor: a unique
// name that New, SignHeaders, LookupScheme and SchemeOf agree on; the
// id, type and key locations well formed; signed headers that verify, and
// fail for another body or secret; and a Tolerance that is the one the
// verifier applies (a timestamp at its edge passes, a second past it is
// stale; 0: a year-old signature still passes).
func TestEverySchemeIsComplete(t *testing.T) {
	t.Parallel()
	if len(registry) < 6 {
		t.Fatalf("%d schemes registered, want at least the 6 built in", len(registry))
	}
	names := Schemes()
	if len(names) != len(registry) {
		t.Fatalf("Schemes() lists %d names for %d descriptors", len(names), len(registry))
	}
	ranks := map[int]string{}
	for i, s := range registry {
		if s.name == "" || names[i] != s.name || slices.Index(names, s.name) != i {
			t.Errorf("descriptor #%d: name %q empty or listed twice (%v)", i+1, s.name, names)
		}
		if other, dup := ranks[s.rank]; dup {
			t.Errorf("%s and %s share rank %d: their order in Schemes would depend on file names", other, s.name, s.rank)
		}
		ranks[s.rank] = s.name
		if got, ok := LookupScheme(s.name); !ok || got != s {
			t.Errorf("LookupScheme(%q) = %p, %v; want its descriptor", s.name, got, ok)
		}
		if s.verifier == nil || s.owns == nil || s.sign == nil {
			t.Errorf("%s: verifier, owns or sign missing", s.name)
			continue
		}
		checkLocation(t, s.name+" event id", s.id)
		checkLocation(t, s.name+" event type", s.typ)
		if key, ok := s.OrderingKey(); ok {
			checkLocation(t, s.name+" ordering key", key)
		}
		configs := schemeConfigs[s.name]
		if configs == nil {
			configs = []HMACConfig{{}}
		}
		for _, cfg := range configs {
			t.Run(s.name+"/"+cfg.TimestampHeader, func(t *testing.T) {
				t.Parallel()
				roundTrip(t, s, cfg)
			})
		}
	}
	if _, ok := LookupScheme("gitlab"); ok {
		t.Error("LookupScheme found an unknown scheme")
	}
	if s := SchemeOf(foreignVerifier{}); s != nil {
		t.Errorf("SchemeOf(a foreign verifier) = %s, want nil", s.name)
	}
}

type foreignVerifier struct{}

func (foreignVerifier) Verify(http.Header, []byte, time.Time) error { return nil }

// checkLocation fails when loc is not a location the ingress can read.
func checkLocation(t *testing.T, what string, loc Location) {
	t.Helper()
	if (loc.Header == "") == (loc.Pointer == "") {
		t.Errorf("%s: %+v sets both or neither of Header and Pointer", what, loc)
	}
	if loc.AltHeader != "" && loc.Header == "" {
		t.Errorf("%s: %+v has an AltHeader without a Header", what, loc)
	}
	for _, p := range []string{loc.Pointer, loc.Suffix} {
		if p != "" && !strings.HasPrefix(p, "/") {
			t.Errorf("%s: %+v: pointer %q does not start with '/'", what, loc, p)
		}
	}
}

// roundTrip signs with the descriptor's signer and verifies with its
// verifier, as a sender and the ingress would.
func roundTrip(t *testing.T, s *Scheme, cfg HMACConfig) {
	const secret, other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
	body := []byte(`{"id":"evt-1","type":"order.created"}`)
	now := time.Unix(1_700_000_000, 0)
	v, err := New(s.name, []string{secret}, Options{HMAC: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got := SchemeOf(v); got != s {
		t.Errorf("SchemeOf(New(%q)) = %v", s.name, got)
	}
	sign := func(secret string, at time.Time) http.Header {
		t.Helper()
		h, err := SignHeaders(s.name, secret, "evt-1", at, body, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := sign(secret, now)
	if err := v.Verify(h, body, now); err != nil {
		t.Fatalf("signed headers %v do not verify: %v", h, err)
	}
	if err := v.Verify(h, append(body, ' '), now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another body: %v, want a mismatch", err)
	}
	if err := v.Verify(sign(other, now), body, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another secret: %v, want a mismatch", err)
	}
	if tol := s.Tolerance(cfg); tol > 0 {
		if err := v.Verify(sign(secret, now.Add(-tol)), body, now); err != nil {
			t.Errorf("signed Tolerance() = %v ago: %v", tol, err)
		}
		if err := v.Verify(sign(secret, now.Add(-tol-time.Second)), body, now); !errors.Is(err, ErrStaleTimestamp) {
			t.Errorf("signed a second more than Tolerance() = %v ago: %v, want stale", tol, err)
		}
	} else if err := v.Verify(sign(secret, now.AddDate(-1, 0, 0)), body, now); err != nil {
		t.Errorf("Tolerance() = 0, but a year-old signature is refused: %v", err)
	}
	// An ordinary delivery is neither a handshake nor a notice.
	if a, err := s.Handshake(h, body); a != nil || err != nil {
		t.Errorf("Handshake(an event) = %v, %v; want nil, nil", a, err)
	}
	event := map[string]string{"/id": "evt-1", "/type": "order.created"}
	if id, typ, ok := s.NoticeID(func(p string) (string, bool) { v, ok := event[p]; return v, ok }); ok {
		t.Errorf("NoticeID(an event) = %q, %q", id, typ)
	}
}

// Slack's handshake and notice, through its descriptor. (The ingress's
// tests post them over HTTP: TestSlackURLVerification,
// TestSlackAppRateLimited.)
func TestSlackHandshakeAndNotice(t *testing.T) {
	t.Parallel()
	s, _ := LookupScheme(SchemeSlack)
	if !s.HasHandshake() {
		t.Fatal("slack has no handshake")
	}
	for _, name := range Schemes() {
		if o, _ := LookupScheme(name); o.HasHandshake() != (name == SchemeSlack) {
			t.Errorf("%s: HasHandshake() = %v", name, o.HasHandshake())
		}
	}
	a, err := s.Handshake(nil, []byte(`{"token":"t","challenge":"c-1","type":"url_verification"}`))
	if err != nil || a == nil || a.ContentType != "application/json" || string(a.Body) != `{"challenge":"c-1"}` {
		t.Fatalf("Handshake = %+v, %v", a, err)
	}
	for _, body := range []string{`{"type":"url_verification"}`, `{"type":"url_verification","challenge":""}`} {
		if a, err := s.Handshake(nil, []byte(body)); a != nil || err == nil {
			t.Errorf("Handshake(%s) = %v, %v; want an error", body, a, err)
		}
	}
	for _, body := range []string{`{"type":"event_callback","event":{"text":"url_verification"}}`, `url_verification`, `{"type":"url_verification","challenge":42}`} {
		if a, err := s.Handshake(nil, []byte(body)); a != nil || err != nil {
			t.Errorf("Handshake(%s) = %v, %v; want nil, nil (not a handshake)", body, a, err)
		}
	}

	notice := map[string]string{"/type": "app_rate_limited", "/team_id": "T1", "/minute_rate_limited": "1518467820", "/api_app_id": "A1"}
	read := func(m map[string]string) func(string) (string, bool) {
		return func(p string) (string, bool) { v, ok := m[p]; return v, ok }
	}
	if id, typ, ok := s.NoticeID(read(notice)); !ok || id != "app_rate_limited:A1:T1:1518467820" || typ != "app_rate_limited" {
		t.Errorf("NoticeID(app_rate_limited) = %q, %q, %v", id, typ, ok)
	}
	delete(notice, "/minute_rate_limited")
	if _, _, ok := s.NoticeID(read(notice)); ok {
		t.Error("a notice without minute_rate_limited got an id")
	}
}
