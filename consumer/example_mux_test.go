package consumer_test

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

// invoicePaid applies one invoice.paid webhook. It writes only through tx,
// in which hookbridge has already claimed the event in its inbox, and
// enqueues the outgoing event in the same transaction.
func invoicePaid(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var body struct {
		Data struct {
			InvoiceID string `json:"invoice_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Body, &body); err != nil {
		return consumer.Permanent(err) // a body that cannot be read never will be: dead-lettered
	}
	if _, err := tx.Exec(ctx, `UPDATE billing.invoices SET paid = true WHERE id = $1`, body.Data.InvoiceID); err != nil {
		return err // rolled back, redelivered later
	}
	return publisher.Enqueue(ctx, tx, publisher.Message{
		ID:      "billing:" + ev.Source + ":" + ev.ID, // stable: same apply, same id
		Subject: "events.billing.invoice_paid",
		Payload: ev.Body,
	})
}

// billing is the migrations of the table invoicePaid updates, with one
// unpaid invoice.
var billing = schema.Set{Name: "billing", FS: fstest.MapFS{
	"0001_invoices.sql": {Data: []byte(`CREATE SCHEMA billing;
CREATE TABLE billing.invoices (id text PRIMARY KEY, paid boolean NOT NULL DEFAULT false);
INSERT INTO billing.invoices (id) VALUES ('inv-7');`)},
}}

func ExampleMux() {
	mux := consumer.NewMux()
	mux.RegisterFunc("invoice.paid", invoicePaid)
	fmt.Println(mux.EventTypes())

	// Applied as serve applies it, on a test database (see hookbridgetest):
	// the invoice is paid and the outgoing event waits in the outbox; a
	// type no handler is registered for fails for good.
	hookbridgetest.Example(func(t testing.TB) {
		db := hookbridgetest.Postgres(t, billing)
		results := db.Apply(t, mux,
			hookbridgetest.NewEvent("stripe", "evt-1", "invoice.paid", []byte(`{"data":{"invoice_id":"inv-7"}}`)),
			hookbridgetest.NewEvent("stripe", "evt-2", "invoice.voided", []byte(`{"data":{"invoice_id":"inv-7"}}`)))
		fmt.Println(hookbridgetest.Outcomes(results), consumer.IsPermanent(results[1].Err))
		fmt.Println("paid invoices:", db.Count(t, `SELECT count(*) FROM billing.invoices WHERE paid`))
		for _, row := range db.Outbox(t, "") {
			fmt.Println(row.ID, row.Subject)
		}
	})
	// Output:
	// [invoice.paid]
	// [processed failed] true
	// paid invoices: 1
	// billing:stripe:evt-1 events.billing.invoice_paid
}
