// Package publisher is hookbridge's transactional outbox: [Enqueue] writes
// an outgoing event in the caller's transaction, so it commits or rolls
// back together with the business change; the relay publishes committed
// rows to JetStream with the row's stable id as Nats-Msg-Id.
package publisher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

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

// ErrIDReused is returned when an id already in the outbox is enqueued with
// a different subject or payload: a stable id must name one event.
var ErrIDReused = errors.New("outbox event id reused with different content")

// Enqueue inserts msgs into the outbox inside tx. Enqueueing the same id
// with the same subject and payload again is a no-op, so a handler that is
// re-run for the same logical operation cannot create a second event.
func Enqueue(ctx context.Context, tx pgx.Tx, msgs ...Message) error {
	for _, m := range msgs {
		if err := validate(m); err != nil {
			return err
		}
		var headers map[string]string
		if len(m.Header) > 0 {
			headers = m.Header
		} else {
			headers = map[string]string{}
		}
		headers = addContextHeaders(ctx, headers) // see WithHeaders
		var key *string
		if m.OrderingKey != "" {
			key = &m.OrderingKey
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO hookbridge.outbox (event_id, subject, headers, payload, ordering_key)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (event_id) DO NOTHING`,
			m.ID, m.Subject, headers, m.Payload, key)
		if err != nil {
			return fmt.Errorf("enqueue outbox event %s: %w", m.ID, err)
		}
		if tag.RowsAffected() == 1 {
			continue
		}
		var subject string
		var payload []byte
		if err := tx.QueryRow(ctx, "SELECT subject, payload FROM hookbridge.outbox WHERE event_id = $1", m.ID).
			Scan(&subject, &payload); err != nil {
			return fmt.Errorf("enqueue outbox event %s: read existing: %w", m.ID, err)
		}
		if subject != m.Subject || !bytes.Equal(payload, m.Payload) {
			return fmt.Errorf("enqueue outbox event %s: %w", m.ID, ErrIDReused)
		}
	}
	return nil
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
		if err := checkHeader(k, v); err != nil {
			return fmt.Errorf("enqueue %s: %w", m.ID, err)
		}
	}
	return nil
}
