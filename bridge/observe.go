package bridge

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// Observation is one answered request, with what ServeHTTP logs about it.
type Observation struct {
	// Source is the source named in the URL; Known tells whether it is a
	// configured one (an unknown name must not become a metric label).
	Source string
	Known  bool
	// Status is the HTTP status code answered.
	Status int
	// Outcome is the answer's status: accepted, duplicate, conflict,
	// challenge or error.
	Outcome string
	// Reason is the short cause of a refusal; never secrets or bodies.
	Reason  string
	EventID string
	// Duration is from the start of the request to the end of the answer.
	Duration time.Duration
}

// VerifyReason is the signature failure reason of a 401 answer (missing,
// malformed, mismatch, stale, other), or "".
func (o Observation) VerifyReason() string {
	if o.Status != http.StatusUnauthorized {
		return ""
	}
	return strings.TrimPrefix(o.Reason, "signature: ")
}

// Observer is told about every answered request (metrics, tracing). It is
// called on the request's goroutine after the answer was written, with the
// request's context; it must be quick and safe for concurrent use.
type Observer interface {
	ObserveRequest(ctx context.Context, o Observation)
}

// observe reports res to the configured observer, if any.
func (h *Handler) observe(r *http.Request, res result, start time.Time) {
	if h.opts.Observer == nil {
		return
	}
	_, known := h.sources[res.source]
	h.opts.Observer.ObserveRequest(r.Context(), Observation{
		Source:   res.source,
		Known:    known,
		Status:   res.code,
		Outcome:  res.body.Status,
		Reason:   res.reason,
		EventID:  res.body.EventID,
		Duration: time.Since(start),
	})
}
