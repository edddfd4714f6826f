package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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
