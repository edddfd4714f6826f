package bridge

import (
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

// SlackChallenge answers Slack's url_verification: a signed body
// {"type":"url_verification","challenge":"…"} is answered with
// {"challenge":"…"} as JSON, one of the forms Slack accepts.
func SlackChallenge(header http.Header, body []byte) (*ChallengeAnswer, error) {
	s, _ := verify.LookupScheme(verify.SchemeSlack)
	return answerHandshake(s, header, body)
}

// ChallengeFor returns the handshake of a scheme's senders
// ([verify.Scheme.Handshake]), or nil when they have none. Only Slack has
// one.
func ChallengeFor(scheme string) Challenge {
	s, ok := verify.LookupScheme(scheme)
	if !ok {
		return nil
	}
	return challengeOf(s)
}

// challengeOf is s's handshake as a Challenge, nil for none (or no
// scheme: a verifier of a kind verify does not describe).
func challengeOf(s *verify.Scheme) Challenge {
	if s == nil || !s.HasHandshake() {
		return nil
	}
	return func(header http.Header, body []byte) (*ChallengeAnswer, error) {
		return answerHandshake(s, header, body)
	}
}

// answerHandshake is s's handshake answer as a ChallengeAnswer; a
// handshake it cannot answer is a bad request (400).
func answerHandshake(s *verify.Scheme, header http.Header, body []byte) (*ChallengeAnswer, error) {
	a, err := s.Handshake(header, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if a == nil {
		return nil, nil
	}
	return &ChallengeAnswer{ContentType: a.ContentType, Body: a.Body}, nil
}

func writeChallenge(w http.ResponseWriter, a *ChallengeAnswer) {
	w.Header().Set("Content-Type", a.ContentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.Body) // the client may be gone; nothing to do
}
