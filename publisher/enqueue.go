// Package publisher is how a handler sends events on: the transactional
// outbox. Inside the transaction hookbridge hands to a handler, [Enqueue]
// (or [EnqueueBatch] for many) writes each outgoing [Message] to the
// outbox, so it commits or rolls back together with the handler's own
// writes; after the commit hookbridge's relay publishes it to the EVENTS
// stream with the message's ID as Nats-Msg-Id, so a redelivered webhook
// never publishes twice. [DerivedID] gives a stable ID per consumer and
// event.
//
// A batch handler that enqueues from several places can gather the
// messages with [Deferred] and write them once, in one outbox pack.
// [WithHeaders] adds headers to every message enqueued with a context.
package publisher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Message is one outgoing event.
type Message struct {
	// ID is the stable event id, chosen by the caller so that retrying the
	// same logical operation produces the same id (for example derived from
	// the consumer name and the incoming event id). It is the JetStream
	// Nats-Msg-Id, and the outbox's unique key.
	ID string
	// Subject is where the relay publishes, under "events.".
	Subject string
	// Payload is the message body.
	Payload []byte
	// Header holds extra headers to publish with the message. Names are
	// printable ASCII without ':'; Nats-* names are reserved (the relay
	// sets Nats-Msg-Id to ID); values have no line breaks.
	Header map[string]string
	// OrderingKey groups messages that must be published in commit order
	// (for example an order id). Empty means no ordering constraint.
	OrderingKey string
}

// DerivedID is the conventional id of the one outgoing event an apply of
// the incoming event (source, eventID) by consumer writes:
// "<consumer>:<source>:<event id>", or with the event id replaced by
// "sha256:" and its SHA-256 in hex when that would pass the 255
// characters an outbox id may have (event ids themselves may be 255
// long). Handlers that use it let operators follow an event to its
// outbox row (`hookbridge events show`, the console's event lookup).
func DerivedID(consumer, source, eventID string) string {
	id := consumer + ":" + source + ":" + eventID
	if len(id) <= 255 {
		return id
	}
	sum := sha256.Sum256([]byte(eventID))
	return consumer + ":" + source + ":sha256:" + hex.EncodeToString(sum[:])
}

// ErrIDReused is returned when an id already in the outbox is enqueued with
// a different subject or payload: a stable id must name one event.
var ErrIDReused = errors.New("outbox event id reused with different content")

// Enqueue inserts msgs into the outbox inside tx. Enqueueing the same id
// with the same subject and payload again is a no-op, so a handler that is
// re-run for the same logical operation cannot create a second event; the
// same id with another subject or payload is [ErrIDReused]. Several
// messages are written with one statement, as by [EnqueueBatch].
func Enqueue(ctx context.Context, tx pgx.Tx, msgs ...Message) error {
	if len(msgs) != 1 || gathering(ctx) != nil {
		return EnqueueBatch(ctx, tx, msgs)
	}
	m := msgs[0]
	if err := validate(m); err != nil {
		return err
	}
	headers, err := encodeHeaders(ctx, m.Header)
	if err != nil {
		return fmt.Errorf("enqueue outbox event %s: %w", m.ID, err)
	}
	w := &writes{}
	w.add(m, headers)
	written, err := store.OutboxWrite(ctx, tx, w.msgs)
	if err != nil {
		return fmt.Errorf("enqueue outbox event %s: %w", m.ID, err)
	}
	if len(written) == 1 {
		return nil
	}
	return checkExisting(ctx, tx, []Message{m})
}

// EnqueueBatch inserts msgs into the outbox inside tx with one statement
// (per 1024 messages), with exactly the semantics of calling [Enqueue] for
// each message in order: every message is validated, messages are written
// (and get their ordering keys' key_seq) in slice order, an id already in
// the outbox or earlier in msgs is a no-op when its subject and payload
// are the same and [ErrIDReused] otherwise. Only when some id was already
// present does it take a second statement, to compare the stored
// messages. On an error the caller must roll tx back, as after a failed
// Enqueue.
//
// When tx claimed, in the inbox, the event each message's id is derived
// from ([DerivedID]: what a consumer's handler writes for the events it
// applies), the messages are stored as one row, a pack, rather than a
// row each: the inbox already guarantees that no other transaction
// writes those ids, and the pack costs a fraction of the WAL (see
// docs/OUTBOX.md, "Packs").
//
// unnest is used rather than COPY: COPY cannot skip existing ids (ON
// CONFLICT), so it would need a staging table and two more round trips;
// see enqueue_bench_test.go for the measurement.
func EnqueueBatch(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if g := gathering(ctx); g != nil {
		return g.add(ctx, msgs)
	}
	w := &writes{}
	distinct := make([]Message, 0, len(msgs))
	first := make(map[string]int, len(msgs)) // id -> index of its first message
	for i, m := range msgs {
		if err := validate(m); err != nil {
			return err
		}
		if j, dup := first[m.ID]; dup {
			// A repeat inside the batch behaves as a repeat in the outbox:
			// Enqueue would find the row the earlier message just wrote.
			if msgs[j].Subject != m.Subject || !bytes.Equal(msgs[j].Payload, m.Payload) {
				return fmt.Errorf("enqueue outbox event %s: %w", m.ID, ErrIDReused)
			}
			continue
		}
		first[m.ID] = i
		h, err := encodeHeaders(ctx, m.Header)
		if err != nil {
			return fmt.Errorf("enqueue outbox event %s: %w", m.ID, err)
		}
		w.add(m, h)
		distinct = append(distinct, m)
	}
	return write(ctx, tx, w, distinct)
}

// write writes w (the columns of msgs, each id once) with one statement
// per [maxPerWrite] messages, then compares the messages whose ids were
// in the outbox already with what it holds.
func write(ctx context.Context, tx pgx.Tx, w *writes, msgs []Message) error {
	done := make(map[string]bool, len(w.msgs))
	if len(w.msgs) > maxPerWrite {
		var keys []string
		for _, m := range w.msgs {
			if m.OrderingKey != nil {
				keys = append(keys, *m.OrderingKey)
			}
		}
		if len(keys) > 0 {
			if err := store.OutboxLockKeys(ctx, tx, keys); err != nil {
				return fmt.Errorf("enqueue %d outbox events: lock their keys: %w", len(w.msgs), err)
			}
		}
	}
	for c := range slices.Chunk(w.msgs, maxPerWrite) {
		written, err := store.OutboxWrite(ctx, tx, c)
		if err != nil {
			return fmt.Errorf("enqueue %d outbox events: %w", len(c), err)
		}
		for _, id := range written {
			done[id] = true
		}
	}
	if len(done) == len(w.msgs) {
		return nil
	}
	var repeats []Message
	for _, m := range msgs {
		if !done[m.ID] {
			repeats = append(repeats, m)
		}
	}
	return checkExisting(ctx, tx, repeats)
}

// maxPerWrite is the most messages one statement writes: a pack holds at
// most 1024 (the step of the outbox's id and key_seq sequences).
const maxPerWrite = 1024

// writes are validated messages in the order of one write.
type writes struct {
	msgs []store.OutboxWriteParams
}

func (w *writes) add(m Message, headers *string) {
	w.msgs = append(w.msgs, store.OutboxWriteParams{
		EventID:     m.ID,
		Subject:     m.Subject,
		Headers:     headers,
		Payload:     m.Payload,
		OrderingKey: orderingKey(m),
	})
}

// checkExisting compares msgs with the outbox rows of their ids, which an
// insert found already present: the same subject and payload make the
// enqueue a no-op, anything else is ErrIDReused.
func checkExisting(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	want := make(map[string]Message, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		want[m.ID] = m
		ids[i] = m.ID
	}
	stored, err := store.OutboxGetMany(ctx, tx, ids)
	if err != nil {
		return fmt.Errorf("enqueue outbox event %s: read existing: %w", ids[0], err)
	}
	found := make(map[string]bool, len(msgs))
	for _, c := range stored {
		found[c.EventID] = true
		if m := want[c.EventID]; c.Subject != m.Subject || !bytes.Equal(c.Payload, m.Payload) {
			return fmt.Errorf("enqueue outbox event %s: %w", c.EventID, ErrIDReused)
		}
	}
	for _, id := range ids {
		if !found[id] {
			// Skipped as a conflict yet invisible to this statement's
			// snapshot: only a concurrent writer's row can do that, and
			// only under REPEATABLE READ or SERIALIZABLE, where Postgres
			// normally raises a serialization failure first.
			return fmt.Errorf("enqueue outbox event %s: read existing: row not visible", id)
		}
	}
	return nil
}

// encodeHeaders is the headers column of a message: its own headers plus
// the context's (see WithHeaders), as a JSON object, or NULL when there
// are none (an empty object would take room in every row).
func encodeHeaders(ctx context.Context, own map[string]string) (*string, error) {
	h := addContextHeaders(ctx, own)
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	s := string(b)
	return &s, nil
}

func orderingKey(m Message) *string {
	if m.OrderingKey == "" {
		return nil
	}
	return &m.OrderingKey
}

func validate(m Message) error {
	if !stream.ValidEventID(m.ID) {
		return fmt.Errorf("enqueue: invalid event id %q", m.ID)
	}
	tail, ok := strings.CutPrefix(m.Subject, stream.EventsRoot+".")
	if !ok || !stream.ValidEventType(tail) {
		return fmt.Errorf("enqueue %s: subject %q must be %s.<token>[.<token>…]", m.ID, m.Subject, stream.EventsRoot)
	}
	for k, v := range m.Header {
		if err := stream.CheckHeader(k, v); err != nil {
			return fmt.Errorf("enqueue %s: %w", m.ID, err)
		}
	}
	return nil
}
