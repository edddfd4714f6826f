package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SchemeStandardWebhooks is the Standard Webhooks scheme
// (https://www.standardwebhooks.com/), which hookbridge's own senders
// use: a base64 HMAC-SHA256 of "id.timestamp.body", the id signed in its
// own header, the event type in the body.
const SchemeStandardWebhooks = "standard-webhooks"

func init() {
	register(&Scheme{
		name: SchemeStandardWebhooks,
		rank: 10,
		verifier: func(secrets []string, opts Options) (Verifier, error) {
			return built(NewStandardWebhooks(secrets, opts.Tolerance))
		},
		owns:      is[*StandardWebhooks],
		tolerance: always(DefaultTolerance),
		sign: func(secret, id string, ts time.Time, body []byte, _ HMACConfig) (http.Header, error) {
			sig, err := SignStandard(secret, id, ts, body)
			if err != nil {
				return nil, err
			}
			return header(StandardHeaderID, id, StandardHeaderTimestamp, unixText(ts), StandardHeaderSignature, sig), nil
		},
		// The id read is the one the verifier checked: webhook-id, or
		// svix-id when the delivery uses Svix's header names (the rule
		// of StandardHeaderSet).
		id:  Location{Header: StandardHeaderID, AltHeader: SvixHeaderID},
		typ: Location{Pointer: "/type"},
		// None: the payload is the sender's to shape.
	})
}

// Standard Webhooks header names (https://www.standardwebhooks.com/).
const (
	StandardHeaderID        = "Webhook-Id"
	StandardHeaderTimestamp = "Webhook-Timestamp"
	StandardHeaderSignature = "Webhook-Signature"
)

// Svix, the largest sender of Standard Webhooks, sends the same three
// headers under its own names unless an account pays for the webhook-*
// ones. The signature scheme is identical.
const (
	SvixHeaderID        = "Svix-Id"
	SvixHeaderTimestamp = "Svix-Timestamp"
	SvixHeaderSignature = "Svix-Signature"
)

// StandardHeaders are the names of one Standard Webhooks header set.
type StandardHeaders struct{ ID, Timestamp, Signature string }

var (
	standardSet = StandardHeaders{StandardHeaderID, StandardHeaderTimestamp, StandardHeaderSignature}
	svixSet     = StandardHeaders{SvixHeaderID, SvixHeaderTimestamp, SvixHeaderSignature}
)

// StandardHeaderSet is the header set a Standard Webhooks delivery is
// verified with: the webhook-* set when the request carries any of its
// three headers, else the svix-* set. Never a mix: the id, timestamp and
// signature are checked together, and the event id must be the signed
// one ([StandardID]).
func StandardHeaderSet(h http.Header) StandardHeaders {
	for _, k := range []string{StandardHeaderID, StandardHeaderTimestamp, StandardHeaderSignature} {
		if _, ok := h[k]; ok {
			return standardSet
		}
	}
	for _, k := range []string{SvixHeaderID, SvixHeaderTimestamp, SvixHeaderSignature} {
		if _, ok := h[k]; ok {
			return svixSet
		}
	}
	return standardSet
}

// StandardID is the signed message id of a Standard Webhooks delivery,
// from the header set [StandardHeaderSet] picks.
func StandardID(h http.Header) string { return h.Get(StandardHeaderSet(h).ID) }

// standardSecretPrefix marks a Standard Webhooks secret as base64.
const standardSecretPrefix = "whsec_"

// StandardWebhooks verifies the Standard Webhooks scheme: HMAC-SHA256 over
// "id.timestamp.body", base64 signatures in a space-separated list of
// "v1,<sig>" entries, secrets written "whsec_<base64>".
type StandardWebhooks struct {
	keys      [][]byte
	tolerance time.Duration
}

// NewStandardWebhooks returns a verifier that accepts a signature made by
// any of secrets (several secrets allow rotation without downtime).
// tolerance <= 0 means [DefaultTolerance].
//
// A secret is read by a rule that gives every string one meaning:
// "whsec_<base64>" must be base64 after the prefix (an error otherwise);
// without the prefix, valid standard base64 is decoded and anything else
// is used as raw bytes. So raw text that happens to be valid base64 is
// decoded; to use such text as raw bytes, configure "whsec_" followed by
// the base64 of those bytes.
func NewStandardWebhooks(secrets []string, tolerance time.Duration) (*StandardWebhooks, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("standard webhooks: no secret")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	v := &StandardWebhooks{tolerance: tolerance}
	for i, s := range secrets {
		key, err := standardKey(s)
		if err != nil {
			// Say which secret and why, never echo the secret itself.
			return nil, fmt.Errorf("standard webhooks: secret #%d: %w", i+1, err)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// standardKey turns a configured secret into the HMAC key (rule at
// [NewStandardWebhooks]):
//
//   - "whsec_<base64>" (the spec's form): the rest must be standard base64,
//     because a typo must not quietly become a different key.
//   - no prefix, valid standard base64: the decoded bytes (the reference
//     libraries accept the bare base64 part of a whsec_ secret).
//   - no prefix, not base64: the raw bytes, so a plain-text secret from a
//     provider that does not base64 its keys still works.
func standardKey(secret string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(secret, standardSecretPrefix); ok {
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil || len(key) == 0 {
			return nil, errors.New("whsec_ secret is not followed by base64")
		}
		return key, nil
	}
	if secret == "" {
		return nil, errors.New("empty secret")
	}
	if key, err := base64.StdEncoding.DecodeString(secret); err == nil && len(key) > 0 {
		return key, nil
	}
	return []byte(secret), nil
}

// Verify implements [Verifier].
//
// The signature is checked before the timestamp, so ErrStaleTimestamp
// means "signed by a current secret but outside the window" (a replay or
// a skewed clock) and a forgery is always reported as a mismatch.
//
// The headers are webhook-id/-timestamp/-signature or Svix's
// svix-id/-timestamp/-signature, chosen by [StandardHeaderSet].
func (v *StandardWebhooks) Verify(h http.Header, body []byte, now time.Time) error {
	set := StandardHeaderSet(h)
	id := h.Get(set.ID)
	tsRaw := h.Get(set.Timestamp)
	sigs := signatureValues(h, set.Signature)
	if id == "" || tsRaw == "" || len(sigs) == 0 {
		return fmt.Errorf("standard webhooks: %w", ErrMissingSignature)
	}
	ts, ok := parseUnix(tsRaw)
	if !ok {
		return fmt.Errorf("standard webhooks: timestamp: %w", ErrMalformedSignature)
	}
	var candidates [][]byte
	for entry := range fieldsOf(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue // unknown versions are ignored, as the spec asks
		}
		raw, ok := decodeBase64(sig, sha256.Size)
		if !ok {
			continue // one garbled entry must not hide a good one next to it
		}
		candidates = append(candidates, raw)
	}
	if len(candidates) == 0 {
		return fmt.Errorf("standard webhooks: no v1 signature: %w", ErrMalformedSignature)
	}
	expected := make([][]byte, len(v.keys))
	for i, key := range v.keys {
		expected[i] = standardMAC(key, id, tsRaw, body)
	}
	if !anyMatch(candidates, expected) {
		return fmt.Errorf("standard webhooks: %w", ErrBadSignature)
	}
	if !withinTolerance(ts, now, v.tolerance) {
		return fmt.Errorf("standard webhooks: %w", ErrStaleTimestamp)
	}
	return nil
}

func standardMAC(key []byte, id, ts string, body []byte) []byte {
	return macOf(sha256.New, key, []byte(id), dot, []byte(ts), dot, body)
}

// SignStandard returns the Standard Webhooks signature header value for
// body, for senders and tests. secret is read like [NewStandardWebhooks]
// reads it: "whsec_<base64>", bare base64, or raw text that is not base64.
func SignStandard(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := standardKey(secret)
	if err != nil {
		return "", fmt.Errorf("standard webhooks: %w", err)
	}
	mac := standardMAC(key, id, strconv.FormatInt(ts.Unix(), 10), body)
	return "v1," + base64.StdEncoding.EncodeToString(mac), nil
}

// fieldsOf yields the space-separated entries of every value.
func fieldsOf(values []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, v := range values {
			for f := range strings.FieldsSeq(v) {
				if !yield(f) {
					return
				}
			}
		}
	}
}
