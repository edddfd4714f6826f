// Package orders is the demo domain: handlers for order.created,
// order.paid and order.cancelled that keep demo.orders and announce each
// change through the outbox, all in the transaction hookbridge gives them.
package orders

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"

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

// WebhookBody is the body a sender of the demo source posts for an order
// event (EUR, a fixed timestamp), for tests and examples.
func WebhookBody(eventType, orderID string, amountCents int64) []byte {
	return fmt.Appendf(nil, `{"type":%q,"timestamp":"2026-01-02T03:04:05Z","data":{"order_id":%q,"amount_cents":%d,"currency":"EUR"}}`,
		eventType, orderID, amountCents)
}

// Data is the order part of the body.
type Data struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// ErrUnknownOrder is returned, postponed ([consumer.Postpone]), when an
// event refers to an order that does not exist yet: it may arrive before
// its order.created, which then applies first, and it right after.
var ErrUnknownOrder = errors.New("unknown order")

// Handler returns the handler for all three event types; consumerName is
// used to derive stable outbox ids. Each type's handler applies one event
// (Handle) or a run of events of its type set-wise (HandleBatch: one
// statement for the orders and one for the outbox, however many events),
// with the same effect as applying the run one event at a time in stream
// order.
func Handler(consumerName string) *consumer.Mux {
	m := consumer.NewMux()
	m.Register(Created, created{consumer: consumerName})
	m.Register(Paid, transition{consumer: consumerName, what: "paid", one: `
		UPDATE demo.orders SET status = 'paid', paid_cents = $3, last_event_id = $2,
			version = version + 1, updated_at = now()
		WHERE order_id = $1`, many: `
		UPDATE demo.orders o SET status = 'paid', paid_cents = u.amount, last_event_id = u.last,
			version = o.version + u.n, updated_at = now()
		FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[]) AS u(order_id, last, n, amount)
		WHERE o.order_id = u.order_id
		RETURNING o.order_id`})
	m.Register(Cancelled, transition{consumer: consumerName, what: "cancelled", one: `
		UPDATE demo.orders SET status = 'cancelled', last_event_id = $2,
			version = version + 1, updated_at = now()
		WHERE order_id = $1`, many: `
		UPDATE demo.orders o SET status = 'cancelled', last_event_id = u.last,
			version = o.version + u.n, updated_at = now()
		FROM unnest($1::text[], $2::text[], $3::int[]) AS u(order_id, last, n)
		WHERE o.order_id = u.order_id
		RETURNING o.order_id`})
	return m
}

// created handles order.created: the first event of an order id creates
// it and announces it; a later one with another event id changes nothing
// and announces nothing.
type created struct{ consumer string }

func (h created) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	d, err := decodeCreated(ev)
	if err != nil {
		return err
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
	m, err := announcement(h.consumer, ev, "created", d)
	if err != nil {
		return err
	}
	return publisher.Enqueue(ctx, tx, m)
}

func (h created) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	ds := make([]Data, len(evs))
	ids, amounts, currencies, events := make([]string, len(evs)), make([]int64, len(evs)), make([]string, len(evs)), make([]string, len(evs))
	for i, ev := range evs {
		d, err := decodeCreated(ev)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", ev.Source, ev.ID, err)
		}
		ds[i] = d
		ids[i], amounts[i], currencies[i], events[i] = d.OrderID, d.AmountCents, d.Currency, ev.ID
	}
	// Inserted in stream order, so of two events for one order id the
	// first creates it and the second conflicts with that row, as one by
	// one. RETURNING names the orders created; each was created by the
	// first event of the run carrying its id.
	rows, err := tx.Query(ctx, `
		INSERT INTO demo.orders (order_id, status, amount_cents, currency, created_event_id, last_event_id)
		SELECT u.order_id, 'created', u.amount, u.currency, u.event_id, u.event_id
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) WITH ORDINALITY AS u(order_id, amount, currency, event_id, ord)
		ORDER BY u.ord
		ON CONFLICT (order_id) DO NOTHING
		RETURNING order_id`, ids, amounts, currencies, events)
	if err != nil {
		return fmt.Errorf("insert %d orders: %w", len(evs), err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("insert %d orders: %w", len(evs), err)
	}
	fresh := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		fresh[id] = true
	}
	msgs := make([]publisher.Message, 0, len(inserted))
	for i, ev := range evs {
		if !fresh[ds[i].OrderID] {
			continue
		}
		delete(fresh, ds[i].OrderID) // later events of the id created nothing
		m, err := announcement(h.consumer, ev, "created", ds[i])
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	return publisher.EnqueueBatch(ctx, tx, msgs)
}

// transition handles order.paid and order.cancelled: the order must exist
// (else ErrUnknownOrder: it may arrive before order.created, so the event
// is retried later); each event changes it and announces the change.
type transition struct {
	consumer string
	what     string // "paid" or "cancelled": the status and the announcement
	// one updates one order: $1 order id, $2 event id, $3 amount (paid).
	one string
	// many updates a run's orders from unnest of order id, last event id,
	// number of events and (paid) the last event's amount, returning the
	// ids it found.
	many string
}

func (h transition) paid() bool { return h.what == "paid" }

func (h transition) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	d, err := decode(ev)
	if err != nil {
		return err
	}
	args := []any{d.OrderID, ev.ID}
	if h.paid() {
		args = append(args, d.AmountCents)
	}
	tag, err := tx.Exec(ctx, h.one, args...)
	if err != nil {
		return fmt.Errorf("mark order %s %s: %w", d.OrderID, h.what, err)
	}
	if tag.RowsAffected() == 0 {
		return consumer.Postpone(fmt.Errorf("mark order %s %s: %w", d.OrderID, h.what, ErrUnknownOrder))
	}
	m, err := announcement(h.consumer, ev, h.what, d)
	if err != nil {
		return err
	}
	return publisher.Enqueue(ctx, tx, m)
}

// HandleBatch applies a run with one UPDATE: one row per order, carrying
// what the order's events would leave one by one (the last event's id and
// amount, the version raised once per event). An order that does not
// exist fails the whole run at its first event with ErrUnknownOrder; the
// consumer then applies the events around it, and it alone, whose Handle
// postpones it.
func (h transition) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	ds := make([]Data, len(evs))
	type order struct {
		last   string
		n      int32
		amount int64
	}
	per := map[string]*order{}
	var ids []string // in first-seen order, for a stable statement
	for i, ev := range evs {
		d, err := decode(ev)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", ev.Source, ev.ID, err)
		}
		ds[i] = d
		o := per[d.OrderID]
		if o == nil {
			o = &order{}
			per[d.OrderID] = o
			ids = append(ids, d.OrderID)
		}
		o.last, o.amount = ev.ID, d.AmountCents
		o.n++
	}
	lasts, ns, amounts := make([]string, len(ids)), make([]int32, len(ids)), make([]int64, len(ids))
	for i, id := range ids {
		o := per[id]
		lasts[i], ns[i], amounts[i] = o.last, o.n, o.amount
	}
	args := []any{ids, lasts, ns}
	if h.paid() {
		args = append(args, amounts)
	}
	rows, err := tx.Query(ctx, h.many, args...)
	if err != nil {
		return fmt.Errorf("mark %d orders %s: %w", len(ids), h.what, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("mark %d orders %s: %w", len(ids), h.what, err)
	}
	if len(found) != len(ids) {
		seen := make(map[string]bool, len(found))
		for _, id := range found {
			seen[id] = true
		}
		for i, d := range ds {
			if !seen[d.OrderID] {
				return consumer.FailedAt(i, consumer.Postpone(fmt.Errorf("mark order %s %s: %w", d.OrderID, h.what, ErrUnknownOrder)))
			}
		}
	}
	msgs := make([]publisher.Message, len(evs))
	for i, ev := range evs {
		if msgs[i], err = announcement(h.consumer, ev, h.what, ds[i]); err != nil {
			return err
		}
	}
	return publisher.EnqueueBatch(ctx, tx, msgs)
}

// announcement is the outgoing event. Its id is derived from the consumer
// and the incoming event, so the same apply can never yield two ids.
func announcement(consumerName string, ev consumer.Event, what string, d Data) (publisher.Message, error) {
	payload, err := json.Marshal(map[string]any{
		"type":         "orders." + what,
		"order_id":     d.OrderID,
		"amount_cents": d.AmountCents,
		"currency":     d.Currency,
		"cause":        map[string]string{"source": ev.Source, "event_id": ev.ID},
	})
	if err != nil {
		return publisher.Message{}, fmt.Errorf("encode outgoing event: %w", err)
	}
	return publisher.Message{
		ID:          outboxID(consumerName, ev),
		Subject:     "events.orders." + what,
		Payload:     payload,
		OrderingKey: d.OrderID,
	}, nil
}

// outboxID is the outbox id derived from the consumer and the incoming
// event ([publisher.DerivedID]), which `hookbridge events show` and the
// console follow from an event to what its apply wrote.
func outboxID(consumerName string, ev consumer.Event) string {
	return publisher.DerivedID(consumerName, ev.Source, ev.ID)
}

// decodeCreated is decode plus what an order needs to be created.
func decodeCreated(ev consumer.Event) (Data, error) {
	d, err := decode(ev)
	if err != nil {
		return Data{}, err
	}
	if d.AmountCents < 0 || d.Currency == "" {
		return Data{}, consumer.Permanent(fmt.Errorf("order %s: invalid amount or currency", d.OrderID))
	}
	return d, nil
}

// decode reads an order event's JSON document (the body, or the payload
// field of a form-encoded delivery). A document that is not valid UTF-8 is
// refused as permanent: encoding/json would replace the bad bytes with
// U+FFFD, so the stored order would no longer be what the sender signed.
// The same goes for an escaped lone surrogate (\ud800), which decodes to
// U+FFFD too; a body that itself carries U+FFFD is taken as meant.
func decode(ev consumer.Event) (Data, error) {
	doc, err := ev.JSON()
	if err != nil {
		return Data{}, consumer.Permanent(fmt.Errorf("read %s body: %w", ev.Type, err))
	}
	if !utf8.Valid(doc) {
		return Data{}, consumer.Permanent(fmt.Errorf("%s body is not valid UTF-8", ev.Type))
	}
	var b Body
	if err := json.Unmarshal(doc, &b); err != nil {
		return Data{}, consumer.Permanent(fmt.Errorf("decode %s body: %w", ev.Type, err))
	}
	if strings.ContainsRune(b.Type+b.Timestamp+b.Data.OrderID+b.Data.Currency, utf8.RuneError) && !carriesReplacementChar(doc) {
		return Data{}, consumer.Permanent(fmt.Errorf("%s body escapes an invalid UTF-16 surrogate", ev.Type))
	}
	if b.Data.OrderID == "" {
		return Data{}, consumer.Permanent(fmt.Errorf("%s without data.order_id", ev.Type))
	}
	return b.Data, nil
}

// carriesReplacementChar reports whether doc contains U+FFFD itself,
// literally or as a \ufffd escape.
func carriesReplacementChar(doc []byte) bool {
	return bytes.ContainsRune(doc, utf8.RuneError) || bytes.Contains(bytes.ToLower(doc), []byte(`\ufffd`))
}
