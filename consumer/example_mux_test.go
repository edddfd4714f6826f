package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/publisher"
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

func ExampleMux() {
	mux := consumer.NewMux()
	mux.RegisterFunc("invoice.paid", invoicePaid)
	fmt.Println(mux.EventTypes())
	// Output: [invoice.paid]
}
