package bridge_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
)

const slackChallenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"

var slackHandshake = []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"` + slackChallenge + `","type":"url_verification"}`)

// TestSlackURLVerification answers Slack's endpoint check once the
// signature passes, publishes nothing for it, and gives a forged or stale
// handshake no echo of its challenge.
func TestSlackURLVerification(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeSlack)
	in := newIngress(t, bridge.Options{}, sc.source(t))
	now := in.clock.Now()

	h := http.Header{}
	sc.sign(t, sc.secrets[1], now, h, slackHandshake)
	a := in.post(t, sc.name, h, slackHandshake)
	wantCode(t, a, http.StatusOK)
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if want := `{"challenge":"` + slackChallenge + `"}`; string(a.raw) != want {
		t.Errorf("body %s, want %s", a.raw, want)
	}

	refused := map[string]struct {
		sign func(h http.Header, body []byte)
		body []byte
		code int
	}{
		"unknown secret": {func(h http.Header, b []byte) { sc.sign(t, sc.stranger, now, h, b) }, slackHandshake, http.StatusUnauthorized},
		"unsigned":       {func(http.Header, []byte) {}, slackHandshake, http.StatusUnauthorized},
		"stale":          {func(h http.Header, b []byte) { sc.sign(t, sc.secrets[0], now.Add(-time.Hour), h, b) }, slackHandshake, http.StatusUnauthorized},
		"no challenge": {func(h http.Header, b []byte) { sc.sign(t, sc.secrets[0], now, h, b) },
			[]byte(`{"type":"url_verification"}`), http.StatusBadRequest},
		"empty challenge": {func(h http.Header, b []byte) { sc.sign(t, sc.secrets[0], now, h, b) },
			[]byte(`{"type":"url_verification","challenge":""}`), http.StatusBadRequest},
		// Not a string: not a handshake Slack sends, so it is read as an
		// event, which has no event_id.
		"numeric challenge": {func(h http.Header, b []byte) { sc.sign(t, sc.secrets[0], now, h, b) },
			[]byte(`{"type":"url_verification","challenge":42}`), http.StatusBadRequest},
	}
	for name, c := range refused {
		h := http.Header{}
		c.sign(h, c.body)
		a := in.post(t, sc.name, h, c.body)
		if a.code != c.code || a.body.Status != "error" {
			t.Errorf("%s: answer %d %s, want %d error", name, a.code, a.raw, c.code)
		}
		if bytes.Contains(a.raw, []byte(slackChallenge)) {
			t.Errorf("%s: answer echoes the challenge: %s", name, a.raw)
		}
	}
	wantMsgs(t, in, 0)

	// An ordinary event that merely mentions the word is published.
	ev := []byte(`{"type":"event_callback","event_id":"Ev9","event":{"type":"message","text":"url_verification"}}`)
	h = http.Header{}
	sc.sign(t, sc.secrets[0], now, h, ev)
	wantCode(t, in.post(t, sc.name, h, ev), http.StatusAccepted)
	wantMsgs(t, in, 1)
}

// TestChallengeOnlyForSlack sends a Slack-shaped handshake body to a
// Standard Webhooks source: there it is an ordinary event of type
// url_verification and is published.
func TestChallengeOnlyForSlack(t *testing.T) {
	t.Parallel()
	for _, s := range verify.Schemes() {
		if got := bridge.ChallengeFor(s) != nil; got != (s == verify.SchemeSlack) {
			t.Errorf("ChallengeFor(%q) set = %v", s, got)
		}
	}
	sc := schemeNamed(t, verify.SchemeStandardWebhooks)
	in := newIngress(t, bridge.Options{}, sc.source(t))
	h := hdr(verify.StandardHeaderID, "msg_hs")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, slackHandshake)
	a := in.post(t, sc.name, h, slackHandshake)
	wantCode(t, a, http.StatusAccepted)
	if got := in.msg(t, a.body.Seq).Subject; got != "hooks.standard-webhooks.url_verification" {
		t.Fatalf("subject %q", got)
	}
	wantMsgs(t, in, 1)
}

// TestCustomChallenge sets Source.Challenge: it runs after the signature
// and its answer or error replaces publishing.
func TestCustomChallenge(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeHMAC)
	src := sc.source(t)
	var calls atomic.Int32
	src.Challenge = func(h http.Header, body []byte) (*bridge.ChallengeAnswer, error) {
		calls.Add(1)
		switch h.Get("X-Handshake") {
		case "":
			return nil, nil
		case "ok":
			return &bridge.ChallengeAnswer{ContentType: "text/plain", Body: []byte("pong")}, nil
		default:
			return nil, errors.New("bad handshake")
		}
	}
	in := newIngress(t, bridge.Options{}, src)
	post := func(handshake, secret string) answer {
		h, body, _ := sc.sample("evt-1")
		if handshake != "" {
			h.Set("X-Handshake", handshake)
		}
		sc.sign(t, secret, in.clock.Now(), h, body)
		return in.post(t, sc.name, h, body)
	}
	if a := post("ok", sc.stranger); a.code != http.StatusUnauthorized || calls.Load() != 0 {
		t.Fatalf("forged handshake: answer %d, %d calls; want 401 before the hook", a.code, calls.Load())
	}
	a := post("ok", sc.secrets[0])
	if a.code != http.StatusOK || string(a.raw) != "pong" || a.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("handshake: answer %d %q %q", a.code, a.header.Get("Content-Type"), a.raw)
	}
	if a := post("nope", sc.secrets[0]); a.code != http.StatusBadRequest || !strings.Contains(a.body.Error, "bad handshake") {
		t.Fatalf("bad handshake: answer %d %s", a.code, a.raw)
	}
	wantMsgs(t, in, 0)
	wantCode(t, post("", sc.secrets[0]), http.StatusAccepted)
	wantMsgs(t, in, 1)
}

// TestSlackAppRateLimited: Slack's id-less app_rate_limited notice is
// accepted (202) and published once; Slack's retry of the same notice is
// a duplicate (200), and nothing is refused.
func TestSlackAppRateLimited(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeSlack)
	in := newIngress(t, bridge.Options{}, sc.source(t))
	body := []byte(`{"token":"x","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820,"api_app_id":"A1"}`)
	for i, want := range []int{http.StatusAccepted, http.StatusOK} {
		h := http.Header{}
		sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
		a := in.post(t, sc.name, h, body)
		wantCode(t, a, want)
		if a.body.EventID != "app_rate_limited:A1:T1:1518467820" {
			t.Fatalf("attempt %d: event id %q", i+1, a.body.EventID)
		}
	}
	wantMsgs(t, in, 1)
	if got := in.msg(t, 1).Subject; got != "hooks.slack.app_rate_limited" {
		t.Fatalf("subject %q", got)
	}
}
