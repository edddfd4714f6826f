package bridge

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Tracer observes the ingress, in the manner of pgx's tracers: each Start
// method returns the context the step goes on with, and the matching End
// method is called with that context when the step is over. Metrics and
// OpenTelemetry are two implementations; hookbridge's app package wires
// both. Methods are called on the request's goroutine: they must be quick
// and safe for concurrent use.
//
// The End data carry the step's duration, measured once by the handler,
// so that an implementation need not keep a start time in the context (an
// allocation per request on the hot path).
type Tracer interface {
	// TraceReceiveStart is called when a request arrives.
	TraceReceiveStart(ctx context.Context, data TraceReceiveStartData) context.Context
	// TraceReceiveEnd is called once the answer was written.
	TraceReceiveEnd(ctx context.Context, data TraceReceiveEndData)
	// TracePublishStart is called before a message is published to
	// JetStream (with its retries). It may add headers to data.Header,
	// such as the trace context, before the message is sent.
	TracePublishStart(ctx context.Context, data TracePublishStartData) context.Context
	// TracePublishEnd is called when the publish is answered or has
	// failed for good.
	TracePublishEnd(ctx context.Context, data TracePublishEndData)
}

// TraceReceiveStartData is a request as it arrives.
type TraceReceiveStartData struct {
	// Source is the source named in the URL; it may not be configured.
	Source string
}

// TraceReceiveEndData is one answered request.
type TraceReceiveEndData struct {
	// Source is the source named in the URL; Known tells whether it is a
	// configured one (an unknown name must not become a metric label).
	Source string
	Known  bool
	// Status is the HTTP status code answered.
	Status int
	// Outcome is the answer's status: one of the Status* constants.
	Outcome string
	// Reason is the short cause of a refusal; never secrets or bodies.
	Reason  string
	EventID string
	// Unkeyed is set for a delivery of a source with an ordering key that
	// carried none it could read: it was published without order.
	// UnkeyedReason says why: UnkeyedAbsent or UnkeyedUnreadable.
	Unkeyed       bool
	UnkeyedReason string
	// Duration is from the start of the request to the end of the answer.
	Duration time.Duration
}

// VerifyReason is the signature failure reason of a 401 answer (missing,
// malformed, mismatch, stale, other), or "".
func (d TraceReceiveEndData) VerifyReason() string {
	if d.Status != http.StatusUnauthorized {
		return ""
	}
	return strings.TrimPrefix(d.Reason, "signature: ")
}

// TracePublishStartData is a message about to be published.
type TracePublishStartData struct {
	// Stream is the stream it goes to (HOOKS, or HOOKS_CONFLICTS for a
	// rejected body).
	Stream  string
	Subject string
	Source  string
	EventID string
	// Header is the message's header; a tracer may add to it.
	Header nats.Header
}

// PublishResult is how a publish ended.
type PublishResult string

// The results of a publish.
const (
	PublishStored    PublishResult = "stored"    // JetStream stored the message
	PublishDuplicate PublishResult = "duplicate" // JetStream already held the id
	PublishError     PublishResult = "error"     // not stored: see Err
)

// TracePublishEndData is a publish's result.
type TracePublishEndData struct {
	Stream string
	Result PublishResult
	// Seq is the stream sequence of the stored message (or of the
	// original, for a duplicate).
	Seq uint64
	// Attempts is how many times the message was sent.
	Attempts int
	Err      error
	// Duration covers every attempt and the waits between them.
	Duration time.Duration
}

// Why a delivery of a source with an ordering key was published unkeyed
// (TraceReceiveEndData.UnkeyedReason).
const (
	// UnkeyedAbsent: the key's header or pointer names nothing, or a
	// value that is neither a string nor a number.
	UnkeyedAbsent = "absent"
	// UnkeyedUnreadable: the key is read from the body, and the body is
	// not JSON (a Shopify subscription in XML, a form without payload).
	UnkeyedUnreadable = "unreadable"
)

// The Status of an answer's [Response].
const (
	StatusAccepted  = "accepted"
	StatusDuplicate = "duplicate"
	StatusConflict  = "conflict"
	StatusChallenge = "challenge"
	StatusError     = "error"
)

// traceReceiveStart starts the receive step with the configured tracer.
func (h *Handler) traceReceiveStart(r *http.Request) *http.Request {
	if h.opts.Tracer == nil {
		return r
	}
	ctx := h.opts.Tracer.TraceReceiveStart(r.Context(), TraceReceiveStartData{Source: r.PathValue("source")})
	if ctx == r.Context() {
		return r
	}
	return r.WithContext(ctx)
}

// traceReceiveEnd reports res to the configured tracer, if any.
func (h *Handler) traceReceiveEnd(r *http.Request, res result, start time.Time) {
	if h.opts.Tracer == nil {
		return
	}
	_, known := h.sources[res.source]
	h.opts.Tracer.TraceReceiveEnd(r.Context(), TraceReceiveEndData{
		Source:        res.source,
		Known:         known,
		Status:        res.code,
		Outcome:       res.body.Status,
		Reason:        res.reason,
		EventID:       res.body.EventID,
		Unkeyed:       res.unkeyed != "",
		UnkeyedReason: res.unkeyed,
		Duration:      time.Since(start),
	})
}
