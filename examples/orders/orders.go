// Package orders is the demo domain: handlers for order.created,
// order.paid and order.cancelled that keep demo.orders and announce each
// change through the outbox, all in the transaction hookbridge gives them.
package orders

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/publisher"
	"github.com/hookbridge/hookbridge/schema"
)

// Event types handled here.
const (
	Created   = "order.created"
	Paid      = "order.paid"
	Cancelled = "order.cancelled"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations is the demo schema's migration set.
func Migrations() schema.Set {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // fixed at build time
	}
	return schema.Set{Name: "demo", FS: sub}
}

// Body is the webhook body of every order event.
type Body struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      Data   `json:"data"`
}

// Data is the order part of the body.
type Data struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// ErrUnknownOrder is returned when an event refers to an order that does
// not exist yet (it may arrive before order.created: retried later).
var ErrUnknownOrder = errors.New("unknown order")

// Handler returns the handler for all three event types; consumerName is
// used to derive stable outbox ids.
func Handler(consumerName string) *consumer.Mux {
	m := consumer.NewMux()
	m.RegisterFunc(Created, func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		d, err := decode(ev)
		if err != nil {
			return err
		}
		if d.AmountCents < 0 || d.Currency == "" {
			return consumer.Permanent(fmt.Errorf("order %s: invalid amount or currency", d.OrderID))
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO demo.orders (order_id, status, amount_cents, currency, created_event_id, last_event_id)
			VALUES ($1, 'created', $2, $3, $4, $4)
			ON CONFLICT (order_id) DO NOTHING`,
			d.OrderID, d.AmountCents, d.Currency, ev.ID)
		if err != nil {
			return fmt.Errorf("insert order %s: %w", d.OrderID, err)
		}
		if tag.RowsAffected() == 0 {
			// The same order created again by a different event id: keep
			// the first, announce nothing.
			return nil
		}
		return announce(ctx, tx, consumerName, ev, "created", d)
	})
	m.RegisterFunc(Paid, func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		d, err := decode(ev)
		if err != nil {
			return err
		}
		return transition(ctx, tx, consumerName, ev, d, "paid", `
			UPDATE demo.orders SET status = 'paid', paid_cents = $3, last_event_id = $2,
				version = version + 1, updated_at = now()
			WHERE order_id = $1`, d.AmountCents)
	})
	m.RegisterFunc(Cancelled, func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		d, err := decode(ev)
		if err != nil {
			return err
		}
		return transition(ctx, tx, consumerName, ev, d, "cancelled", `
			UPDATE demo.orders SET status = 'cancelled', last_event_id = $2,
				version = version + 1, updated_at = now()
			WHERE order_id = $1`)
	})
	return m
}

// transition runs sql with $1 = order id, $2 = event id, then extra.
func transition(ctx context.Context, tx pgx.Tx, consumerName string, ev consumer.Event, d Data, what, sql string, extra ...any) error {
	tag, err := tx.Exec(ctx, sql, append([]any{d.OrderID, ev.ID}, extra...)...)
	if err != nil {
		return fmt.Errorf("mark order %s %s: %w", d.OrderID, what, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("mark order %s %s: %w", d.OrderID, what, ErrUnknownOrder)
	}
	return announce(ctx, tx, consumerName, ev, what, d)
}

// announce writes the outgoing event. Its id is derived from the consumer
// and the incoming event, so the same apply can never yield two ids.
func announce(ctx context.Context, tx pgx.Tx, consumerName string, ev consumer.Event, what string, d Data) error {
	payload, err := json.Marshal(map[string]any{
		"type":         "orders." + what,
		"order_id":     d.OrderID,
		"amount_cents": d.AmountCents,
		"currency":     d.Currency,
		"cause":        map[string]string{"source": ev.Source, "event_id": ev.ID},
	})
	if err != nil {
		return fmt.Errorf("encode outgoing event: %w", err)
	}
	return publisher.Enqueue(ctx, tx, publisher.Message{
		ID:          outboxID(consumerName, ev),
		Subject:     "events.orders." + what,
		Payload:     payload,
		OrderingKey: d.OrderID,
	})
}

// outboxID is "<consumer>:<source>:<event id>", or with the event id
// replaced by its SHA-256 when that would pass the 255 characters an id
// may have (event ids themselves may be 255 long).
func outboxID(consumerName string, ev consumer.Event) string {
	id := consumerName + ":" + ev.Source + ":" + ev.ID
	if len(id) <= 255 {
		return id
	}
	sum := sha256.Sum256([]byte(ev.ID))
	return consumerName + ":" + ev.Source + ":sha256:" + hex.EncodeToString(sum[:])
}

func decode(ev consumer.Event) (Data, error) {
	var b Body
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return Data{}, consumer.Permanent(fmt.Errorf("decode %s body: %w", ev.Type, err))
	}
	if b.Data.OrderID == "" {
		return Data{}, consumer.Permanent(fmt.Errorf("%s without data.order_id", ev.Type))
	}
	return b.Data, nil
}
