package publisher_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/publisher"
)

// A program's own transaction (not a handler's) changes a row and
// announces it: both commit, or neither does, and the relay publishes the
// event with its stable id.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE billing.invoices SET voided = true WHERE id = $1`, "inv-42"); err != nil {
			return err
		}
		return publisher.Enqueue(ctx, tx, publisher.Message{
			ID:          "billing:void:inv-42", // the same operation always yields this id
			Subject:     "events.billing.invoice_voided",
			Payload:     []byte(`{"invoice_id":"inv-42"}`),
			OrderingKey: "inv-42", // published after earlier events of this invoice
		})
	})
	if err != nil {
		log.Fatal(err)
	}
}
