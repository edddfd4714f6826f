package bridge_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// hmacConfig is the generic scheme's configuration in these tests: hex
// SHA-256 with a prefix and a signed timestamp.
var hmacConfig = verify.HMACConfig{Header: "X-Signature", Prefix: "sha256=", TimestampHeader: "X-Timestamp"}

// scheme is one signature scheme as a sender uses it: two active secrets
// (a rotation in progress: old first, new second), how to sign, and a
// typical delivery.
type scheme struct {
	name    string
	secrets []string
	// stranger is a well-formed secret that is not configured.
	stranger string
	// timestamped reports whether the scheme signs a timestamp.
	timestamped bool
	// sample returns a typical delivery with event id id (headers without
	// signature, body) and its event type as the provider spells it.
	sample func(id string) (http.Header, []byte, string)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

var schemes = []scheme{
	{
		name:        verify.SchemeStandardWebhooks,
		secrets:     []string{"whsec_" + b64("standard-old-secret"), "whsec_" + b64("standard-new-secret")},
		stranger:    "whsec_" + b64("someone-else"),
		timestamped: true,
		sample: func(id string) (http.Header, []byte, string) {
			return hdr(verify.StandardHeaderID, id), []byte(`{"type":"order.created","data":{"order_id":"o-1"}}`), "order.created"
		},
	},
	{
		name:     verify.SchemeGitHub,
		secrets:  []string{"github-old-secret", "github-new-secret"},
		stranger: "someone-else",
		sample: func(id string) (http.Header, []byte, string) {
			return hdr("X-GitHub-Delivery", id, "X-GitHub-Event", "issues"),
				[]byte(`{"action":"opened","issue":{"number":1347}}`), "issues.opened"
		},
	},
	{
		name:        verify.SchemeStripe,
		secrets:     []string{"whsec_stripe_old", "whsec_stripe_new"},
		stranger:    "whsec_someone_else",
		timestamped: true,
		sample: func(id string) (http.Header, []byte, string) {
			return http.Header{}, []byte(`{"id":"` + id + `","object":"event","type":"payment_intent.succeeded"}`), "payment_intent.succeeded"
		},
	},
	{
		name:     verify.SchemeShopify,
		secrets:  []string{"shopify-old-secret", "shopify-new-secret"},
		stranger: "someone-else",
		sample: func(id string) (http.Header, []byte, string) {
			return hdr("X-Shopify-Webhook-Id", id, "X-Shopify-Topic", "orders/create"),
				[]byte(`{"id":820982911946154508,"email":"jon@example.com"}`), "orders/create"
		},
	},
	{
		name:        verify.SchemeSlack,
		secrets:     []string{"slack-old-secret", "slack-new-secret"},
		stranger:    "someone-else",
		timestamped: true,
		sample: func(id string) (http.Header, []byte, string) {
			return http.Header{}, []byte(`{"type":"event_callback","event_id":"` + id + `","event":{"type":"app_mention","text":"hi"}}`), "app_mention"
		},
	},
	{
		name:        verify.SchemeHMAC,
		secrets:     []string{"hmac-old-secret", "hmac-new-secret"},
		stranger:    "someone-else",
		timestamped: true,
		sample: func(id string) (http.Header, []byte, string) {
			return http.Header{}, []byte(`{"id":"` + id + `","type":"invoice.paid"}`), "invoice.paid"
		},
	},
}

func schemeNamed(t testing.TB, name string) scheme {
	t.Helper()
	for _, s := range schemes {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no scheme %q", name)
	return scheme{}
}

// source builds the ingress source the way app's configuration does: the
// scheme's verifier over both secrets and its default id/type fields. The
// source is named after the scheme.
func (s scheme) source(t testing.TB) bridge.Source {
	t.Helper()
	opts := verify.Options{}
	if s.name == verify.SchemeHMAC {
		opts.HMAC = hmacConfig
	}
	v, err := verify.New(s.name, s.secrets, opts)
	if err != nil {
		t.Fatal(err)
	}
	id, typ := bridge.DefaultFields(s.name)
	return bridge.Source{Name: s.name, Verifier: v, EventID: id, EventType: typ}
}

// sign adds the signature headers a sender holding secret would add at ts,
// made by the scheme's own signer (verify.SignHeaders). Standard Webhooks
// signs the Webhook-Id already in h, and signs an empty id when h has
// none, which then stays absent.
func (s scheme) sign(t testing.TB, secret string, ts time.Time, h http.Header, body []byte) {
	t.Helper()
	var cfg verify.HMACConfig
	if s.name == verify.SchemeHMAC {
		cfg = hmacConfig
	}
	signed, err := verify.SignHeaders(s.name, secret, h.Get(verify.StandardHeaderID), ts, body, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range signed {
		if k != verify.StandardHeaderID {
			h[k] = vs
		}
	}
}

// clock is a settable time source for Options.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.Set(t)
	return c
}

func (c *clock) Now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ingress is a handler on its own embedded JetStream, served over real HTTP
// by a server built with bridge.NewHTTPServer.
type ingress struct {
	js    *hookbridgetest.JetStream
	h     *bridge.Handler
	clock *clock
	url   string // base URL, e.g. http://127.0.0.1:1234
}

// newIngress starts JetStream with the ingress streams and an HTTP server
// for a handler over sources. opts.Sources, Logger and Now are filled in.
func newIngress(t testing.TB, opts bridge.Options, sources ...bridge.Source) *ingress {
	t.Helper()
	js := hookbridgetest.NATS(t)
	js.EnsureHooks(t)
	in := serveOn(t, js.JS, opts, sources...)
	in.js = js
	return in
}

// serveHTTP serves h at bridge.Pattern over real HTTP, with the ingress's
// server limits, until the test ends, and returns the base URL.
func serveHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(bridge.Pattern, h)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config = bridge.NewHTTPServer(mux, bridge.DefaultLimits())
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// answer is what the ingress said.
type answer struct {
	code   int
	header http.Header
	raw    []byte
	body   bridge.Response
}

// post sends body with h to /webhooks/{source}.
func (in *ingress) post(t testing.TB, source string, h http.Header, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, in.url+"/webhooks/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{code: resp.StatusCode, header: resp.Header, raw: raw}
	if resp.Header.Get("Content-Type") == "application/json" {
		_ = json.Unmarshal(raw, &a.body)
	}
	return a
}

// hooks is how many messages HOOKS holds.
func (in *ingress) hooks(t testing.TB) uint64 { return in.js.StreamMsgs(t, stream.Hooks) }

// msg reads the HOOKS message at seq.
func (in *ingress) msg(t testing.TB, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := in.js.JS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(context.Background(), seq)
	if err != nil {
		t.Fatalf("get HOOKS message %d: %v", seq, err)
	}
	return m
}

func wantMsgs(t testing.TB, in *ingress, want uint64) {
	t.Helper()
	if n := in.hooks(t); n != want {
		t.Fatalf("HOOKS holds %d messages, want %d", n, want)
	}
}

func wantCode(t testing.TB, a answer, code int) {
	t.Helper()
	if a.code != code {
		t.Fatalf("answer %d %s, want %d", a.code, a.raw, code)
	}
}
