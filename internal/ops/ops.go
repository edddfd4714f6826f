// Package ops holds the operator actions on a running deployment, in one
// place for the admin HTTP API (package admin) and the command line
// (package cli): the overview (status), replay, list, show, requeue or
// discard dead letters, list, show and resolve conflicts, list and
// requeue outbox rows, follow the life of one event, pause, resume or
// delete a consumer's durables, and show, test, disable, enable and
// replay to the delivery endpoints and triage their dead letters. Each view has one read here and one
// JSON shape, which both print. It reads and writes Postgres
// through internal/store and JetStream through a client; it holds no
// state of its own between calls.
package ops

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/delivery"
)

// Errors the actions wrap, so that callers can answer with the right
// status (the admin API) or exit code.
var (
	// ErrNotFound: no such dead letter, conflict, outbox row, event or
	// consumer.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request itself is wrong (a bad selector or state).
	ErrInvalid = errors.New("invalid request")
	// ErrNotApplied: the action was tried and could not do its work
	// (the event failed again, or its message has left the stream).
	ErrNotApplied = errors.New("not applied")
	// ErrUnsupported: the NATS server lacks the feature (consumer pause
	// needs nats-server 2.11 or later).
	ErrUnsupported = errors.New("not supported by the NATS server")
)

// Consumer is a configured consumer as the actions need it: its name, its
// subscription, and the handler a replay or requeue applies with.
type Consumer struct {
	Name         string
	Handler      consumer.Handler
	Sources      []string
	EventTypes   []string
	ApplyTimeout time.Duration
}

// receives reports whether the consumer subscribes to events of source
// with type eventType ("" matches any type).
func (c Consumer) receives(source, eventType string) bool {
	if len(c.Sources) > 0 && !slices.Contains(c.Sources, source) {
		return false
	}
	return eventType == "" || len(c.EventTypes) == 0 || slices.Contains(c.EventTypes, eventType)
}

// Ops runs operator actions against one deployment.
type Ops struct {
	Pool      *pgxpool.Pool
	JS        jetstream.JetStream // nil: actions that need JetStream fail
	Consumers []Consumer          // the configured consumers
	// HooksMaxAge is the age from which the storage guard deletes the
	// HOOKS messages every consumer has applied (streams.max_age), which
	// status shows as HOOKS's max age; 0: the stream's own.
	HooksMaxAge time.Duration
	Logger      *slog.Logger // the replays' own log (nil: slog.Default)
	// Endpoints are the configured delivery endpoints (defaults applied,
	// secrets read), EndpointsErr why some could not be read (an action on
	// one not in Endpoints then says so), and Sign signs `endpoints test`.
	Endpoints    []delivery.Endpoint
	EndpointsErr error
	Sign         delivery.Signer
}

// errNoJetStream is returned by actions that need JetStream when the
// caller has no connection.
var errNoJetStream = errors.New("no JetStream connection")

// Consumer returns the configured consumer called name.
func (o *Ops) Consumer(name string) (Consumer, error) {
	for _, c := range o.Consumers {
		if c.Name == name {
			return c, nil
		}
	}
	names := make([]string, 0, len(o.Consumers))
	for _, c := range o.Consumers {
		names = append(names, c.Name)
	}
	return Consumer{}, fmt.Errorf("consumer %q is not configured (have: %s): %w", name, strings.Join(names, ", "), ErrNotFound)
}

func (o *Ops) consumerNames() []string {
	out := make([]string, 0, len(o.Consumers))
	for _, c := range o.Consumers {
		out = append(out, c.Name)
	}
	return out
}
