package bridge_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// fuzzNow is the handler's fixed clock in FuzzHandler (2026-01-01Z), so
// checked-in seeds with timestamps stay valid.
var fuzzNow = time.Unix(1767225600, 0)

// fuzzSecret is the one secret of every source in FuzzHandler.
func fuzzSecret(scheme string) string {
	if scheme == verify.SchemeStandardWebhooks {
		return "whsec_" + b64("fuzz-standard-secret") // key: "fuzz-standard-secret"
	}
	return "fuzz-" + scheme + "-secret"
}

// fuzzMaxBody is small so the fuzzer reaches the 413 path.
const fuzzMaxBody = 4096

// documented are the answers docs/INGRESS.md lists.
var documented = map[int]string{
	http.StatusOK:                    "duplicate or handshake",
	http.StatusAccepted:              "accepted",
	http.StatusBadRequest:            "error",
	http.StatusUnauthorized:          "error",
	http.StatusNotFound:              "error",
	http.StatusMethodNotAllowed:      "error",
	http.StatusConflict:              "conflict",
	http.StatusRequestEntityTooLarge: "error",
	http.StatusServiceUnavailable:    "error",
}

// FuzzHandler sends arbitrary requests (method, source, headers, body) to
// the whole handler, one source per scheme with a fixed secret, on an
// embedded JetStream. When sign is odd and source names a scheme, the
// harness signs the request at fuzzNow+offset seconds after the fuzzed
// headers are set, so the fuzzer also explores what happens after the
// signature passes (handshakes, identity, duplicates, conflicts).
//
// Checks: no panic; the status is a documented one and the JSON body
// agrees with it; and nothing is published (to HOOKS or the conflicts
// stream), nor is any 2xx/409 given, unless the request carries a
// signature that an independent computation here (crypto/hmac directly,
// not package verify) finds valid for its source within the tolerance.
func FuzzHandler(f *testing.F) {
	js := hookbridgetest.NATS(f)
	js.EnsureHooks(f)
	var sources []bridge.Source
	for _, sc := range schemes {
		sc.secrets = []string{fuzzSecret(sc.name)}
		sources = append(sources, sc.source(f))
	}
	h, err := bridge.New(js.JS, bridge.Options{
		Sources:      sources,
		MaxBodyBytes: fuzzMaxBody,
		Now:          func() time.Time { return fuzzNow },
		Logger:       quietLogger(),
	})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	hooks, err := js.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		f.Fatal(err)
	}
	conflicts, err := js.JS.Stream(ctx, stream.Conflicts)
	if err != nil {
		f.Fatal(err)
	}
	stored := func(t *testing.T) uint64 {
		var n uint64
		for _, s := range []jetstream.Stream{hooks, conflicts} {
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatalf("stream info: %v", err)
			}
			n += info.State.Msgs
		}
		return n
	}

	// A few seeds in code; the rest are in testdata/fuzz/FuzzHandler.
	f.Add("POST", "github", "X-GitHub-Delivery: d-1\nX-GitHub-Event: issues\n", []byte(`{"action":"opened"}`), uint8(1), int64(0))
	f.Add("POST", "slack", "", slackHandshake, uint8(1), int64(0))
	f.Add("POST", "stripe", "", []byte(`{"id":"evt_1","type":"charge.succeeded"}`), uint8(1), int64(-301))
	f.Add("PUT", "shopify", "X-Shopify-Topic: orders/create\n", []byte(`{}`), uint8(0), int64(0))
	// Shapes the handler learned later: Svix's header names (the harness
	// signs webhook-*; the fuzzer can rename), a free-text type, a form
	// delivery, a repeated signature line and Slack's id-less notice.
	f.Add("POST", "standard-webhooks", "Svix-Id: msg_1\nSvix-Timestamp: 1767225600\nSvix-Signature: v1,x\n", []byte(`{"type":"deploy:staging"}`), uint8(0), int64(0))
	f.Add("POST", "github", "Content-Type: application/x-www-form-urlencoded\nX-GitHub-Delivery: d-2\nX-GitHub-Event: repository_dispatch\n",
		[]byte(`payload=%7B%22action%22%3A%22deploy%3Astaging%22%7D`), uint8(1), int64(0))
	f.Add("POST", "shopify", "X-Shopify-Webhook-Id: w-1\nX-Shopify-Topic: orders/create\nX-Shopify-Hmac-Sha256: bad\n", []byte(`{}`), uint8(0), int64(0))
	f.Add("POST", "slack", "", []byte(`{"type":"app_rate_limited","team_id":"T1","minute_rate_limited":1767225540,"api_app_id":"A1"}`), uint8(1), int64(0))

	f.Fuzz(func(t *testing.T, method, source, rawHeaders string, body []byte, sign uint8, offset int64) {
		header := parseHeaderLines(rawHeaders)
		if sign&1 == 1 {
			for _, sc := range schemes {
				if sc.name == source {
					sc.sign(t, fuzzSecret(sc.name), fuzzNow.Add(time.Duration(offset%(1<<32))*time.Second), header, body)
				}
			}
		}
		valid := independentlyValid(source, header, body, fuzzNow)

		req, err := http.NewRequest(http.MethodPost, "http://hookbridge/webhooks/x", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Method = method
		req.Header = header
		req.SetPathValue("source", source)
		rec := httptest.NewRecorder()

		before := stored(t)
		h.ServeHTTP(rec, req)
		after := stored(t)

		code := rec.Code
		if _, ok := documented[code]; !ok {
			t.Fatalf("undocumented status %d: %s", code, rec.Body)
		}
		if after < before {
			t.Fatalf("stream shrank from %d to %d", before, after)
		}
		if after > before && !valid {
			t.Fatalf("published %d message(s) for a request without a valid signature (answer %d %s)", after-before, code, rec.Body)
		}
		if (code == http.StatusOK || code == http.StatusAccepted || code == http.StatusConflict) && !valid {
			t.Fatalf("answer %d %s to a request without a valid signature", code, rec.Body)
		}
		if code == http.StatusAccepted && after != before+1 {
			t.Fatalf("202 but %d new messages", after-before)
		}
		if code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
		checkAnswerBody(t, code, rec)
	})
}

// checkAnswerBody checks the JSON answer agrees with its status. A 200
// from a Slack handshake is {"challenge":…} instead.
func checkAnswerBody(t *testing.T, code int, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("answer %d with Content-Type %q", code, rec.Header().Get("Content-Type"))
	}
	var r struct {
		bridge.Response
		Challenge *string `json:"challenge"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("answer %d is not JSON: %q", code, rec.Body)
	}
	switch {
	case code == http.StatusOK && r.Challenge != nil:
		if r.Status != "" {
			t.Fatalf("handshake answer with a status: %s", rec.Body)
		}
	case code == http.StatusOK:
		if r.Status != "duplicate" || r.EventID == "" || r.Seq == 0 {
			t.Fatalf("200 answer %s, want a duplicate with id and seq", rec.Body)
		}
	case code == http.StatusAccepted:
		if r.Status != "accepted" || r.EventID == "" || r.Seq == 0 {
			t.Fatalf("202 answer %s, want accepted with id and seq", rec.Body)
		}
	case code == http.StatusConflict:
		if r.Status != "conflict" || r.EventID == "" {
			t.Fatalf("409 answer %s", rec.Body)
		}
	default:
		if r.Status != "error" || r.Error == "" {
			t.Fatalf("%d answer %s, want an error", code, rec.Body)
		}
	}
}

// parseHeaderLines reads "Name: value" lines; names are canonicalised as
// a server would, repeated names keep every value.
func parseHeaderLines(raw string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(raw, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k == "" {
			continue
		}
		k = textproto.CanonicalMIMEHeaderKey(k)
		h[k] = append(h[k], strings.TrimLeft(v, " "))
	}
	return h
}

// The independent oracle. It is deliberately lenient (any letter case
// for hex and prefixes, any element of a list, any signed timestamp in a
// Stripe header): it must accept everything the verifiers accept, so that
// "published but not valid here" can only mean a forgery got through.

func refHMAC(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// refFresh reports whether s is a Unix time within the default tolerance
// of now.
func refFresh(s string, now time.Time) bool {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return false
	}
	n, err := strconv.ParseUint(s, 10, 62)
	if err != nil {
		return false
	}
	d := int64(n) - now.Unix()
	tol := int64(verify.DefaultTolerance / time.Second)
	return d >= -tol && d <= tol
}

func independentlyValid(source string, h http.Header, body []byte, now time.Time) bool {
	key := []byte(fuzzSecret(source))
	b := string(body)
	switch source {
	case verify.SchemeStandardWebhooks:
		// Either header set (Standard Webhooks' or Svix's names) may carry
		// a valid signature; the oracle accepts both.
		key = []byte("fuzz-standard-secret")
		for _, set := range [][3]string{
			{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"},
			{"Svix-Id", "Svix-Timestamp", "Svix-Signature"},
		} {
			id, ts := h.Get(set[0]), h.Get(set[1])
			if id == "" || !refFresh(ts, now) {
				continue
			}
			want := "v1," + base64.StdEncoding.EncodeToString(refHMAC(key, id, ".", ts, ".", b))
			if anyValue(h, set[2], func(v string) bool { return strings.Contains(v, want) }) {
				return true
			}
		}
		return false
	case verify.SchemeGitHub:
		want := "sha256=" + hex.EncodeToString(refHMAC(key, b))
		return anyValue(h, verify.GitHubHeaderSignature, func(v string) bool { return strings.EqualFold(v, want) })
	case verify.SchemeShopify:
		want := base64.StdEncoding.EncodeToString(refHMAC(key, b))
		return anyValue(h, verify.ShopifyHeaderHMAC, func(v string) bool { return v == want })
	case verify.SchemeStripe:
		return anyValue(h, verify.StripeHeaderSignature, func(line string) bool {
			items := strings.Split(line, ",")
			for _, t := range items {
				ts, ok := strings.CutPrefix(t, "t=")
				if !ok || !refFresh(ts, now) {
					continue
				}
				want := hex.EncodeToString(refHMAC(key, ts, ".", b))
				for _, v := range items {
					if sig, ok := strings.CutPrefix(v, "v1="); ok && strings.EqualFold(sig, want) {
						return true
					}
				}
			}
			return false
		})
	case verify.SchemeSlack:
		ts := h.Get(verify.SlackHeaderTimestamp)
		if !refFresh(ts, now) {
			return false
		}
		want := "v0=" + hex.EncodeToString(refHMAC(key, "v0:", ts, ":", b))
		return anyValue(h, verify.SlackHeaderSignature, func(v string) bool { return strings.EqualFold(v, want) })
	case verify.SchemeHMAC:
		ts := h.Get(hmacConfig.TimestampHeader)
		if !refFresh(ts, now) {
			return false
		}
		want := hmacConfig.Prefix + hex.EncodeToString(refHMAC(key, ts, ".", b))
		return anyValue(h, hmacConfig.Header, func(v string) bool { return strings.EqualFold(v, want) })
	default:
		return false
	}
}

// anyValue reports whether ok holds for one of the values of a header
// repeated on several lines (the verifiers consider every line).
func anyValue(h http.Header, key string, ok func(string) bool) bool {
	for _, v := range h.Values(key) {
		if ok(v) {
			return true
		}
	}
	return false
}

// TestOracleAgreesWithSigners keeps the fuzz oracle honest: what the
// package's signers produce, the oracle accepts; a changed byte, it does
// not. Without this the oracle could reject everything and FuzzHandler
// would prove nothing.
func TestOracleAgreesWithSigners(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		h, body, _ := sc.sample("evt-1")
		sc.sign(t, fuzzSecret(sc.name), fuzzNow, h, body)
		if !independentlyValid(sc.name, h, body, fuzzNow) {
			t.Errorf("%s: oracle refuses a signed delivery", sc.name)
		}
		if independentlyValid(sc.name, h, append([]byte(" "), body...), fuzzNow) {
			t.Errorf("%s: oracle accepts a changed body", sc.name)
		}
		if sc.timestamped && independentlyValid(sc.name, h, body, fuzzNow.Add(time.Hour)) {
			t.Errorf("%s: oracle accepts a stale delivery", sc.name)
		}
		if independentlyValid("other", h, body, fuzzNow) {
			t.Errorf("%s: oracle accepts an unknown source", sc.name)
		}
	}
}
