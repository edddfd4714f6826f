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

// SchemeStripe is Stripe's scheme: a hex HMAC-SHA256 of "<t>.<body>" in
// Stripe-Signature, the event id and type in the body.
const SchemeStripe = "stripe"

func init() {
	register(&Scheme{
		name: SchemeStripe,
		rank: 30,
		verifier: func(secrets []string, opts Options) (Verifier, error) {
			return built(NewStripe(secrets, opts.Tolerance))
		},
		owns:      is[*Stripe],
		tolerance: always(DefaultTolerance),
		sign: func(secret, _ string, ts time.Time, body []byte, _ HMACConfig) (http.Header, error) {
			return header(StripeHeaderSignature, SignStripe(secret, ts, body)), nil
		},
		id:  Location{Pointer: "/id"},
		typ: Location{Pointer: "/type"},
		// The event's object (an invoice, a subscription, a customer):
		// its events apply in order.
		key: &Location{Pointer: "/data/object/id"},
	})
}

// StripeHeaderSignature carries "t=<unix>,v1=<hex>[,v1=<hex>...]".
const StripeHeaderSignature = "Stripe-Signature"

// Stripe verifies Stripe webhooks: hex HMAC-SHA256 of "<t>.<body>". Only
// v1 signatures count; v0 (test-mode legacy) and unknown schemes are
// ignored, as Stripe's libraries do. Stripe itself sends several v1
// entries while an endpoint secret is being rolled.
type Stripe struct {
	keys      [][]byte
	tolerance time.Duration
}

// NewStripe returns a verifier that accepts a signature made by any of
// secrets. A secret is the endpoint's "whsec_..." string used byte for byte
// (Stripe does not base64-decode it). tolerance <= 0 means
// [DefaultTolerance], Stripe's own default of 300 s; it applies in both
// directions.
func NewStripe(secrets []string, tolerance time.Duration) (*Stripe, error) {
	keys, err := rawKeys("stripe", secrets)
	if err != nil {
		return nil, err
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return &Stripe{keys: keys, tolerance: tolerance}, nil
}

// Verify implements [Verifier]. The signature is checked before the
// timestamp so that ErrStaleTimestamp always means a genuine but old (or
// early) event, never a forgery.
func (v *Stripe) Verify(h http.Header, body []byte, now time.Time) error {
	lines := signatureValues(h, StripeHeaderSignature)
	if len(lines) == 0 {
		return fmt.Errorf("stripe: %w", ErrMissingSignature)
	}
	// Each line is a whole "t=…,v1=…" header with its own timestamp; one
	// that verifies and is fresh is enough. The error reported is the
	// most telling one: stale (genuine but old) over mismatch over a
	// parse error.
	var parseErr error
	parsed, stale := false, false
	for _, raw := range lines {
		tsRaw, sigs, err := parseStripeHeader(raw)
		if err != nil {
			if parseErr == nil {
				parseErr = err
			}
			continue
		}
		parsed = true
		if !anyMatch(sigs, macsOf(sha256.New, v.keys, []byte(tsRaw), dot, body)) {
			continue
		}
		ts, _ := parseUnix(tsRaw) // already validated by parseStripeHeader
		if withinTolerance(ts, now, v.tolerance) {
			return nil
		}
		stale = true
	}
	switch {
	case stale:
		return fmt.Errorf("stripe: %w", ErrStaleTimestamp)
	case parsed:
		return fmt.Errorf("stripe: %w", ErrBadSignature)
	default:
		return fmt.Errorf("stripe: %w", parseErr)
	}
}

// parseStripeHeader splits a Stripe-Signature value into its timestamp
// text and decoded v1 signatures. Every element must be key=value and
// there must be exactly one t: a second t would leave it ambiguous which
// one was signed. An unreadable v1 entry is skipped rather than fatal, so a
// garbled extra signature cannot hide a good one.
func parseStripeHeader(s string) (string, [][]byte, error) {
	var ts string
	var sigs [][]byte
	for item := range strings.SplitSeq(s, ",") {
		key, val, ok := strings.Cut(item, "=")
		if !ok {
			return "", nil, fmt.Errorf("element without '=': %w", ErrMalformedSignature)
		}
		switch key {
		case "t":
			if ts != "" {
				return "", nil, fmt.Errorf("more than one timestamp: %w", ErrMalformedSignature)
			}
			if _, ok := parseUnix(val); !ok {
				return "", nil, fmt.Errorf("timestamp: %w", ErrMalformedSignature)
			}
			ts = val
		case "v1":
			if sig, ok := decodeHex(val, sha256.Size); ok {
				sigs = append(sigs, sig)
			}
		}
	}
	if ts == "" {
		return "", nil, fmt.Errorf("no timestamp: %w", ErrMalformedSignature)
	}
	if len(sigs) == 0 {
		return "", nil, fmt.Errorf("no v1 signature: %w", ErrMalformedSignature)
	}
	return ts, sigs, nil
}

// SignStripe returns a Stripe-Signature value for body at ts with one v1
// signature, for senders and tests.
func SignStripe(secret string, ts time.Time, body []byte) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(macOf(sha256.New, []byte(secret), []byte(t), dot, body))
}
