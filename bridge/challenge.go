package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// Challenge recognises a sender's endpoint-verification handshake, such as
// Slack's url_verification, and says how to answer it.
//
// The handler calls it only after the signature passed, and before the
// event id and type are looked for (a handshake has neither). It returns
// nil, nil for an ordinary delivery, which is then published; a non-nil
// answer, which is sent with 200 and nothing is published; or an error for
// a handshake that cannot be answered, sent as 400.
type Challenge func(header http.Header, body []byte) (*ChallengeAnswer, error)

// ChallengeAnswer is the body of a 200 answer to a handshake.
type ChallengeAnswer struct {
	ContentType string
	Body        []byte
}

// slackHandshake is the type of Slack's Events API endpoint check.
const slackHandshake = "url_verification"

// SlackChallenge answers Slack's url_verification: a signed body
// {"type":"url_verification","challenge":"…"} is answered with
// {"challenge":"…"} as JSON, one of the forms Slack accepts.
func SlackChallenge(_ http.Header, body []byte) (*ChallengeAnswer, error) {
	// Every Slack event would otherwise be decoded twice; only a body that
	// mentions the handshake type can be one.
	if !bytes.Contains(body, []byte(slackHandshake)) {
		return nil, nil
	}
	var msg struct {
		Type      string  `json:"type"`
		Challenge *string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type != slackHandshake {
		// Not a handshake (or not JSON): the event id and type checks
		// that follow give the precise answer.
		return nil, nil
	}
	if msg.Challenge == nil || *msg.Challenge == "" {
		return nil, fmt.Errorf("%w: url_verification without a challenge", errBadRequest)
	}
	out, err := json.Marshal(struct {
		Challenge string `json:"challenge"`
	}{*msg.Challenge})
	if err != nil {
		return nil, errors.New("cannot encode challenge")
	}
	return &ChallengeAnswer{ContentType: "application/json", Body: out}, nil
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
func slackNotice(doc []byte) (id, typ string, ok bool) {
	if t, _ := jsonLookup(doc, "/type"); t != slackRateLimited {
		return "", "", false
	}
	minute, ok := jsonLookup(doc, "/minute_rate_limited")
	if !ok || minute == "" {
		return "", "", false
	}
	app, _ := jsonLookup(doc, "/api_app_id")
	team, _ := jsonLookup(doc, "/team_id")
	return slackRateLimited + ":" + app + ":" + team + ":" + minute, slackRateLimited, true
}

// ChallengeFor returns the handshake of a scheme's senders, or nil when
// they have none. Only Slack has one.
func ChallengeFor(scheme string) Challenge {
	if scheme == verify.SchemeSlack {
		return SlackChallenge
	}
	return nil
}

// defaultChallenge is [ChallengeFor] by verifier type, for sources built
// without a scheme name at hand.
func defaultChallenge(v verify.Verifier) Challenge {
	if _, ok := v.(*verify.Slack); ok {
		return SlackChallenge
	}
	return nil
}

func writeChallenge(w http.ResponseWriter, a *ChallengeAnswer) {
	w.Header().Set("Content-Type", a.ContentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.Body) // the client may be gone; nothing to do
}
