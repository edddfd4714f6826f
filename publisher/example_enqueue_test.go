package publisher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
	"github.com/hookbridge/hookbridge/schema"
)

// billing is the example's own migrations, as a team ships them with its
// handler (usually an embed.FS of .sql files).
var billing = schema.Set{Name: "billing", FS: fstest.MapFS{
	"0001_invoices.sql": {Data: []byte(`CREATE SCHEMA billing;
CREATE TABLE billing.invoices (id text PRIMARY KEY, voided boolean NOT NULL DEFAULT false);
INSERT INTO billing.invoices (id) VALUES ('inv-42');`)},
}}

// A handler changes a row and announces it in the transaction hookbridge
// gives it: the row, the event's inbox claim and the outbox row commit
// together, or none does, and the relay publishes the event later with its
// stable id. Applied twice, the event is a duplicate the second time and
// enqueues nothing more.
func ExampleEnqueue() {
	voidInvoice := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		var body struct {
			InvoiceID string `json:"invoice_id"`
		}
		if err := json.Unmarshal(ev.Body, &body); err != nil {
			return consumer.Permanent(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE billing.invoices SET voided = true WHERE id = $1`, body.InvoiceID); err != nil {
			return err
		}
		return publisher.Enqueue(ctx, tx, publisher.Message{
			ID:          "billing:" + ev.Source + ":" + ev.ID, // the same event always yields this id
			Subject:     "events.billing.invoice_voided",
			Payload:     ev.Body,
			OrderingKey: body.InvoiceID, // published after earlier events of this invoice
		})
	})
	hookbridgetest.Example(func(t testing.TB) {
		db := hookbridgetest.Postgres(t, billing)
		ev := hookbridgetest.NewEvent("billing-app", "void-1", "invoice.voided", []byte(`{"invoice_id":"inv-42"}`))
		fmt.Println(hookbridgetest.Outcomes(db.Apply(t, voidInvoice, ev, ev)))
		for _, row := range db.Outbox(t, "") {
			fmt.Println(row.ID, row.Subject, row.OrderingKey, row.Status, string(row.Payload))
		}
	})
	// Output:
	// [processed duplicate]
	// billing:billing-app:void-1 events.billing.invoice_voided inv-42 pending {"invoice_id":"inv-42"}
}

// Outside a handler, a program's own transaction enqueues the same way:
// its change and the event commit together, or neither does.
func ExampleEnqueue_ownTransaction() {
	hookbridgetest.Example(func(t testing.TB) {
		db := hookbridgetest.Postgres(t, billing)
		ctx := context.Background()
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE billing.invoices SET voided = true WHERE id = $1`, "inv-42"); err != nil {
				return err
			}
			return publisher.Enqueue(ctx, tx, publisher.Message{
				ID:          "billing:void:inv-42", // the same operation always yields this id
				Subject:     "events.billing.invoice_voided",
				Payload:     []byte(`{"invoice_id":"inv-42"}`),
				OrderingKey: "inv-42",
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range db.Outbox(t, "") {
			fmt.Println(row.ID, row.Subject, row.OrderingKey, row.Status)
		}
	})
	// Output:
	// billing:void:inv-42 events.billing.invoice_voided inv-42 pending
}
