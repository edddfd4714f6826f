package hookbridgetest

import (
	"context"
	"crypto/sha256"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// DefaultConsumer is the consumer name [Database.Apply] applies as: the
// inbox key's first part, and what handlers that derive outbox ids from
// their consumer's name are built with in tests.
const DefaultConsumer = "hookbridgetest"

// seq numbers the events [NewEvent] makes, as HOOKS would (distinct and
// increasing within a test process).
var seq atomic.Uint64

// NewEvent is the event a consumer hands its handler for a first delivery
// of body, sent by source with the given id and type: headers as the
// ingress sets them, the body's hash, a stream sequence of its own.
func NewEvent(source, id, eventType string, body []byte) consumer.Event {
	h := nats.Header{}
	h.Set(stream.HeaderSource, source)
	h.Set(stream.HeaderEventID, id)
	h.Set(stream.HeaderEventType, eventType)
	now := time.Now().UTC()
	h.Set(stream.HeaderReceivedAt, now.Format(time.RFC3339Nano))
	return consumer.Event{
		Source:       source,
		ID:           id,
		Type:         eventType,
		Header:       h,
		Body:         body,
		BodySHA256:   sha256.Sum256(body),
		Subject:      stream.HookSubject(source, eventType),
		StreamSeq:    seq.Add(1),
		NumDelivered: 1,
		ReceivedAt:   now,
	}
}

// Apply applies evs with h as the consumer [DefaultConsumer]; see
// [Database.ApplyAs].
func (d *Database) Apply(t testing.TB, h consumer.Handler, evs ...consumer.Event) []consumer.Result {
	t.Helper()
	return d.ApplyAs(t, DefaultConsumer, h, evs...)
}

// ApplyAs applies evs, in order, as the consumer named consumerName
// through the path serve uses for a delivered batch: inbox claim first, the handler (its
// HandleBatch for a [consumer.BatchHandler]) in the same transaction,
// commit; a failure narrows down to the failing event. It returns one
// result per event: Processed, Duplicate, Conflict, or Failed with the
// error. Nothing is acked or redelivered; apply an event again to see its
// redelivery (set NumDelivered). More than 1024 events (the
// largest batch serve applies) fail the test.
func (d *Database) ApplyAs(t testing.TB, consumerName string, h consumer.Handler, evs ...consumer.Event) []consumer.Result {
	t.Helper()
	if len(evs) > engine.MaxBatch {
		t.Fatalf("apply: %d events, at most %d per batch", len(evs), engine.MaxBatch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return engine.ApplyBatch(ctx, d.Pool, consumerName, h, evs)
}

// Outcomes are the outcomes of results, for comparing with a want list.
func Outcomes(results []consumer.Result) []consumer.Outcome {
	out := make([]consumer.Outcome, len(results))
	for i, r := range results {
		out[i] = r.Outcome
	}
	return out
}
