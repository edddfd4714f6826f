package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SchemeSlack is Slack's request signing: a hex HMAC-SHA256 of
// "v0:<timestamp>:<body>", the event id and type in the body, and the
// url_verification handshake.
const SchemeSlack = "slack"

func init() {
	register(&Scheme{
		name: SchemeSlack,
		rank: 50,
		verifier: func(secrets []string, opts Options) (Verifier, error) {
			return built(NewSlack(secrets, opts.Tolerance))
		},
		owns:      is[*Slack],
		tolerance: always(DefaultTolerance),
		sign: func(secret, _ string, ts time.Time, body []byte, _ HMACConfig) (http.Header, error) {
			return header(SlackHeaderTimestamp, unixText(ts), SlackHeaderSignature, SignSlack(secret, ts, body)), nil
		},
		id:  Location{Pointer: "/event_id"},
		typ: Location{Pointer: "/event/type"},
		// None: an event is about a channel, a message or a user.
		handshake: slackHandshake,
		notice:    slackNotice,
	})
}

// Slack request-signing headers.
const (
	SlackHeaderSignature = "X-Slack-Signature"
	SlackHeaderTimestamp = "X-Slack-Request-Timestamp"
)

const slackVersion = "v0"

// Slack verifies Slack's signed requests: hex HMAC-SHA256 of
// "v0:<timestamp>:<body>", sent as "v0=<hex>", with the timestamp in its
// own header.
type Slack struct {
	keys      [][]byte
	tolerance time.Duration
}

// NewSlack returns a verifier that accepts a signature made by any of
// secrets (signing secrets, used byte for byte; several allow rotation).
// tolerance <= 0 means [DefaultTolerance], the five minutes Slack
// recommends.
func NewSlack(secrets []string, tolerance time.Duration) (*Slack, error) {
	keys, err := rawKeys("slack", secrets)
	if err != nil {
		return nil, err
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return &Slack{keys: keys, tolerance: tolerance}, nil
}

// Verify implements [Verifier]. The signature is checked before the
// timestamp so that ErrStaleTimestamp always means a genuine but old (or
// early) request, never a forgery.
func (v *Slack) Verify(h http.Header, body []byte, now time.Time) error {
	tsRaw := h.Get(SlackHeaderTimestamp)
	sigs := signatureValues(h, SlackHeaderSignature)
	if tsRaw == "" || len(sigs) == 0 {
		return fmt.Errorf("slack: %w", ErrMissingSignature)
	}
	ts, ok := parseUnix(tsRaw)
	if !ok {
		return fmt.Errorf("slack: timestamp: %w", ErrMalformedSignature)
	}
	var got [][]byte
	for _, sig := range sigs {
		hexSig, ok := strings.CutPrefix(sig, slackVersion+"=")
		if !ok {
			continue
		}
		if raw, ok := decodeHex(hexSig, sha256.Size); ok {
			got = append(got, raw)
		}
	}
	if len(got) == 0 {
		return fmt.Errorf("slack: no %s=<hex SHA-256>: %w", slackVersion, ErrMalformedSignature)
	}
	if !anyMatch(got, macsOf(sha256.New, v.keys, slackBase(tsRaw), body)) {
		return fmt.Errorf("slack: %w", ErrBadSignature)
	}
	if !withinTolerance(ts, now, v.tolerance) {
		return fmt.Errorf("slack: %w", ErrStaleTimestamp)
	}
	return nil
}

// slackBase is the part of Slack's basestring before the body.
func slackBase(ts string) []byte {
	return []byte(slackVersion + ":" + ts + ":")
}

// SignSlack returns the X-Slack-Signature value Slack would send for body
// at ts, for senders and tests. The request must also carry
// X-Slack-Request-Timestamp set to ts in Unix seconds.
func SignSlack(secret string, ts time.Time, body []byte) string {
	mac := macOf(sha256.New, []byte(secret), slackBase(strconv.FormatInt(ts.Unix(), 10)), body)
	return slackVersion + "=" + hex.EncodeToString(mac)
}

// slackURLVerification is the type of Slack's Events API endpoint check.
const slackURLVerification = "url_verification"

// slackHandshake answers Slack's url_verification: a signed body
// {"type":"url_verification","challenge":"…"} is answered with
// {"challenge":"…"} as JSON, one of the forms Slack accepts.
func slackHandshake(_ http.Header, body []byte) (*HandshakeAnswer, error) {
	// Every Slack event would otherwise be decoded twice; only a body that
	// mentions the handshake type can be one.
	if !bytes.Contains(body, []byte(slackURLVerification)) {
		return nil, nil
	}
	var msg struct {
		Type      string  `json:"type"`
		Challenge *string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type != slackURLVerification {
		// Not a handshake (or not JSON): the event id and type checks
		// that follow give the precise answer.
		return nil, nil
	}
	if msg.Challenge == nil || *msg.Challenge == "" {
		return nil, errors.New("url_verification without a challenge")
	}
	out, err := json.Marshal(struct {
		Challenge string `json:"challenge"`
	}{*msg.Challenge})
	if err != nil {
		return nil, errors.New("cannot encode challenge")
	}
	return &HandshakeAnswer{ContentType: "application/json", Body: out}, nil
}

// slackRateLimited is the type of the notice Slack sends, instead of
// events, while an app is over the Events API rate limit:
// {"token":…,"type":"app_rate_limited","team_id":"T…",
// "minute_rate_limited":1518467820,"api_app_id":"A…"}. It carries no
// event_id, and Slack counts a non-2xx answer as a failing endpoint.
const slackRateLimited = "app_rate_limited"

// slackNotice gives Slack's id-less app_rate_limited notice an id of its
// own, so it is published like an event (type app_rate_limited) instead
// of being refused: "app_rate_limited:<api_app_id>:<team_id>:<minute>".
// The id is derived only from signed fields, so a repeat of the same
// notice is a duplicate. Any other body is not a notice.
func slackNotice(read func(pointer string) (string, bool)) (id, typ string, ok bool) {
	if t, _ := read("/type"); t != slackRateLimited {
		return "", "", false
	}
	minute, ok := read("/minute_rate_limited")
	if !ok || minute == "" {
		return "", "", false
	}
	app, _ := read("/api_app_id")
	team, _ := read("/team_id")
	return slackRateLimited + ":" + app + ":" + team + ":" + minute, slackRateLimited, true
}
