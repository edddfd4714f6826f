package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// SchemeGitHub is GitHub's scheme: a hex HMAC-SHA256 of the body in
// X-Hub-Signature-256, the event id and type in its own headers.
const SchemeGitHub = "github"

func init() {
	register(&Scheme{
		name:     SchemeGitHub,
		rank:     20,
		verifier: func(secrets []string, _ Options) (Verifier, error) { return built(NewGitHub(secrets)) },
		owns:     is[*GitHub],
		sign: func(secret, _ string, _ time.Time, body []byte, _ HMACConfig) (http.Header, error) {
			return header(GitHubHeaderSignature, SignGitHub(secret, body)), nil
		},
		// No timestamp is signed: see GitHub.
		id: Location{Header: "X-GitHub-Delivery"},
		// "issues" + action "opened" = "issues.opened"; a push has no
		// action and stays "push".
		typ: Location{Header: "X-GitHub-Event", Suffix: "/action"},
		// None: a delivery is about one of many kinds of things (an
		// issue, a push, a check run).
	})
}

// GitHubHeaderSignature carries GitHub's "sha256=<hex>" signature. The
// legacy SHA-1 X-Hub-Signature header is deliberately not accepted.
const GitHubHeaderSignature = "X-Hub-Signature-256"

const githubPrefix = "sha256="

// GitHub verifies GitHub webhook deliveries: hex HMAC-SHA256 of the raw
// body. GitHub signs no timestamp, so replays cannot be refused here; dedupe
// on X-GitHub-Delivery downstream if that matters.
type GitHub struct {
	keys [][]byte
}

// NewGitHub returns a verifier that accepts a signature made by any of
// secrets (several secrets allow rotation). Secrets are used byte for byte.
func NewGitHub(secrets []string) (*GitHub, error) {
	keys, err := rawKeys("github", secrets)
	if err != nil {
		return nil, err
	}
	return &GitHub{keys: keys}, nil
}

// Verify implements [Verifier]. now is unused: GitHub signs no timestamp.
func (v *GitHub) Verify(h http.Header, body []byte, _ time.Time) error {
	sigs := signatureValues(h, GitHubHeaderSignature)
	if len(sigs) == 0 {
		return fmt.Errorf("github: %w", ErrMissingSignature)
	}
	var got [][]byte
	for _, sig := range sigs {
		hexSig, ok := strings.CutPrefix(sig, githubPrefix)
		if !ok {
			continue
		}
		if raw, ok := decodeHex(hexSig, sha256.Size); ok {
			got = append(got, raw)
		}
	}
	if len(got) == 0 {
		return fmt.Errorf("github: no %s<hex SHA-256>: %w", githubPrefix, ErrMalformedSignature)
	}
	if !anyMatch(got, macsOf(sha256.New, v.keys, body)) {
		return fmt.Errorf("github: %w", ErrBadSignature)
	}
	return nil
}

// SignGitHub returns the X-Hub-Signature-256 value GitHub would send for
// body, for senders and tests.
func SignGitHub(secret string, body []byte) string {
	return githubPrefix + hex.EncodeToString(macOf(sha256.New, []byte(secret), body))
}
