// Package verify checks webhook signatures over the raw request body, and
// makes them.
//
// Each scheme (Standard Webhooks, GitHub, Stripe, Shopify, Slack and a
// configurable HMAC) is a small [Verifier] with no I/O: it sees the
// request headers, the exact body bytes and the current time, and answers
// nil or an error that says why the request is not trusted ([Reason] gives
// it a short label for logs and metrics). The package uses the standard
// library only.
//
// A receiver builds a scheme's verifier from its configured secrets with
// [New] and calls Verify on each delivery; a sender (or a test) signs with
// [SignHeaders], the one signer for every scheme. [Schemes] lists the
// names they accept.
//
// Everything else the ingress knows of a scheme is in its [Scheme]
// descriptor, registered from the scheme's own file: whether it signs a
// timestamp ([Scheme.Tolerance]), where its senders put the event id and
// type and the entity an event is about ([Location]), its endpoint
// handshake and its id-less notices. Adding a scheme is one file and its
// test.
//
// Nothing here parses the body as JSON before the signature passed: a
// handshake or notice is read from a body that already verified.
package verify

import (
	"crypto/hmac"
	"errors"
	"net/http"
	"time"
)

// Verifier authenticates one webhook delivery.
//
// Verify must be safe for concurrent use and must compare signatures in
// constant time. body is the raw request body exactly as received.
type Verifier interface {
	Verify(header http.Header, body []byte, now time.Time) error
}

// Reasons a delivery is refused. Verifiers wrap one of these so callers can
// count failures by reason without matching strings.
var (
	// ErrMissingSignature means a required signature, id or timestamp header is absent.
	ErrMissingSignature = errors.New("missing signature")
	// ErrMalformedSignature means a signature header could not be parsed.
	ErrMalformedSignature = errors.New("malformed signature")
	// ErrBadSignature means no signature matched any active secret.
	ErrBadSignature = errors.New("signature mismatch")
	// ErrStaleTimestamp means the signed timestamp is outside the tolerance.
	ErrStaleTimestamp = errors.New("timestamp outside tolerance")
)

// Reason maps a verification error to a short, stable label for logs and
// metrics ("missing", "malformed", "mismatch", "stale", "other").
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrMissingSignature):
		return "missing"
	case errors.Is(err, ErrMalformedSignature):
		return "malformed"
	case errors.Is(err, ErrBadSignature):
		return "mismatch"
	case errors.Is(err, ErrStaleTimestamp):
		return "stale"
	default:
		return "other"
	}
}

// anyEqual reports whether got equals one of the expected MACs. Every
// candidate is compared in constant time and the loop does not stop early,
// so timing does not reveal which secret or signature matched.
func anyEqual(got []byte, want [][]byte) bool {
	ok := 0
	for _, w := range want {
		ok |= boolToInt(hmac.Equal(got, w))
	}
	return ok == 1
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// withinTolerance reports whether ts is no further than tol from now, in
// either direction (a clock ahead of ours is as suspect as one behind).
//
// It compares instants rather than taking |now-ts|: Time.Sub saturates at
// the smallest Duration for a timestamp centuries ahead, and negating that
// overflows back to a negative number, which would pass any tolerance.
func withinTolerance(ts, now time.Time, tol time.Duration) bool {
	return !ts.Before(now.Add(-tol)) && !ts.After(now.Add(tol))
}
