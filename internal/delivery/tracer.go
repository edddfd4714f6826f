package delivery

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// Tracer observes the delivery, in the manner of pgx's tracers and of
// the engine's and the relay's: a Start method returns the context the
// step goes on with, and the matching End method is called with it when
// the step is over. Prometheus metrics and OpenTelemetry spans are two
// implementations; hookbridge's app package wires both. Methods are
// called on the sender's goroutines and must be quick.
type Tracer interface {
	// TraceAttemptStart is called as an attempt's request is about to be
	// sent. The trace context in the returned context's span (if any) is
	// sent to the endpoint in traceparent.
	TraceAttemptStart(ctx context.Context, data TraceAttemptStartData) context.Context
	// TraceAttemptEnd is called when the attempt's answer (or failure)
	// is in, before anything is recorded or acked.
	TraceAttemptEnd(ctx context.Context, data TraceAttemptEndData)
	// TraceDeadLetter is called once a delivery is dead-lettered.
	TraceDeadLetter(ctx context.Context, data TraceDeadLetterData)
	// TraceEndpointState is called when an endpoint starts or stops
	// failing, or is disabled or enabled by this process.
	TraceEndpointState(ctx context.Context, data TraceEndpointStateData)
}

// TraceAttemptStartData is one attempt as it starts.
type TraceAttemptStartData struct {
	Endpoint  string
	EventID   string
	Subject   string
	StreamSeq uint64
	// Attempt is the attempt's number, from 1.
	Attempt int
	// Header is the event's message header (the trace context the relay
	// carried among it); do not modify it.
	Header nats.Header
}

// TraceAttemptEndData is one attempt's outcome.
type TraceAttemptEndData struct {
	Endpoint string
	EventID  string
	Attempt  int
	// Status is the HTTP status, 0 when there was no answer.
	Status int
	// Class is the outcome's class: [StatusClass].
	Class    string
	Success  bool
	Duration time.Duration
}

// TraceDeadLetterData is a delivery that failed its whole schedule.
type TraceDeadLetterData struct {
	Endpoint   string
	EventID    string
	Attempts   int
	LastStatus int
	LastClass  string
}

// Endpoint states a [Tracer] is told of. Failing is enabled with every
// attempt failing since some time.
const (
	StateEnabled  = "enabled"
	StateFailing  = "failing"
	StateDisabled = "disabled"
)

// TraceEndpointStateData is an endpoint's change of state.
type TraceEndpointStateData struct {
	Endpoint string
	State    string
	// Reason says why it was disabled ("" otherwise).
	Reason string
}

// StatusClass is an attempt's outcome as a bounded label: 2xx (success),
// 3xx, 4xx, 5xx or 1xx by the answer's status, or, without an answer,
// timeout, connect (refused, reset, TLS), refused (an address the
// endpoint may not reach) or other.
func StatusClass(status int, errorClass string) string {
	switch errorClass {
	case "", "status":
	case classTimeout:
		return "timeout"
	case classConnect, classTLS:
		return "connect"
	case classRefused:
		return "refused"
	default:
		return "other"
	}
	switch {
	case status >= 100 && status < 200:
		return "1xx"
	case status >= 200 && status < 300:
		return "2xx"
	case status >= 300 && status < 400:
		return "3xx"
	case status >= 400 && status < 500:
		return "4xx"
	case status >= 500 && status < 600:
		return "5xx"
	}
	return "other"
}

// StatusClasses are every value [StatusClass] returns.
var StatusClasses = []string{"1xx", "2xx", "3xx", "4xx", "5xx", "timeout", "connect", "refused", "other"}

// Error classes recorded for an attempt: short words, never an error's
// text (which may carry a URL).
const (
	classStatus  = "status"          // an answer that is not a 2xx
	classTimeout = "timeout"         // no (whole) answer within the timeout
	classConnect = "connect"         // refused, reset, unreachable
	classTLS     = "tls"             // the certificate did not verify
	classRefused = "refused_address" // an address the endpoint may not reach
	classExpired = "expired"         // the event left EVENTS before it was sent
	// classCanceled is an attempt the process gave up (it is stopping):
	// not counted, never recorded.
	classCanceled = "canceled"
)

// nopTracer observes nothing.
type nopTracer struct{}

func (nopTracer) TraceAttemptStart(ctx context.Context, _ TraceAttemptStartData) context.Context {
	return ctx
}
func (nopTracer) TraceAttemptEnd(context.Context, TraceAttemptEndData)       {}
func (nopTracer) TraceDeadLetter(context.Context, TraceDeadLetterData)       {}
func (nopTracer) TraceEndpointState(context.Context, TraceEndpointStateData) {}
