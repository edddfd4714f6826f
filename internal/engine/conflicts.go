package engine

import (
	"context"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// IngressConflictDetector is the detected_by value of conflicts found by
// the ingress inside JetStream's duplicate window.
const IngressConflictDetector = "ingress"

// conflictRecorderName is the durable consumer that copies ingress
// conflicts from JetStream into hookbridge.conflicts.
const conflictRecorderName = "hookbridge_conflicts"

// ConflictRecorder writes the conflicts the ingress published to the
// conflicts stream into hookbridge.conflicts. The ingress never talks to
// Postgres; this is how its conflicts become rows.
type ConflictRecorder struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	r    *runner
}

// NewConflictRecorder returns a recorder; run it with [ConflictRecorder.Run].
func NewConflictRecorder(pool *pgxpool.Pool, js jetstream.JetStream, logger *slog.Logger) *ConflictRecorder {
	if logger == nil {
		logger = slog.Default()
	}
	c := &ConflictRecorder{pool: pool, log: logger}
	c.r = &runner{
		name:       conflictRecorderName,
		js:         js,
		streamName: stream.Conflicts,
		cfg: jetstream.ConsumerConfig{
			Durable:       conflictRecorderName,
			Description:   "hookbridge: records ingress conflicts in Postgres",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxDeliver:    -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		},
		concurrency: 1,
		batchSize:   1,
		batchWait:   time.Millisecond,
		log:         logger,
		process:     c.process,
	}
	return c
}

// Run records conflicts until ctx is cancelled.
func (c *ConflictRecorder) Run(ctx context.Context) error { return c.r.run(ctx) }

func (c *ConflictRecorder) process(ctx context.Context, msgs []jetstream.Msg) []action {
	actions := make([]action, len(msgs))
	for i, m := range msgs {
		h := m.Headers()
		rec := ConflictRecord{
			DetectedBy:   IngressConflictDetector,
			Source:       h.Get(stream.HeaderSource),
			EventID:      h.Get(stream.HeaderEventID),
			EventType:    conflictEventType(h),
			RejectedBody: m.Data(),
		}
		if sum, err := hex.DecodeString(h.Get(stream.HeaderOriginalSHA256)); err == nil && len(sum) > 0 {
			rec.OriginalSHA256 = sum
		}
		rec.OriginalSeq, _ = strconv.ParseInt(h.Get(stream.HeaderOriginalSeq), 10, 64)
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return RecordConflict(ctx, tx, rec) })
		cancel()
		if err != nil {
			c.log.Warn("record ingress conflict failed, will retry", "source", rec.Source, "event_id", rec.EventID, "err", err)
			actions[i] = action{kind: nak, delay: 5 * time.Second}
			continue
		}
		c.log.Warn("conflict recorded", "detected_by", IngressConflictDetector, "source", rec.Source, "event_id", rec.EventID, "type", rec.EventType)
		actions[i] = action{kind: ack}
	}
	return actions
}

// conflictEventType is the provider's spelling of a conflict's type: the
// ingress percent-encodes a type that a NATS header would not carry
// unchanged, as on HOOKS (see EventFromMsg). A type Postgres text cannot
// hold (NUL, invalid UTF-8) keeps its encoded spelling, as in the inbox,
// and so does a value that does not decode.
func conflictEventType(h nats.Header) string {
	v := h.Get(stream.HeaderEventType)
	t, ok := stream.TypeFromHeader(v, h.Get(stream.HeaderEventTypeEncoding))
	if !ok {
		return v
	}
	if !utf8.ValidString(t) || strings.IndexByte(t, 0) >= 0 {
		t, _ = stream.TypeHeader(t)
	}
	return t
}
