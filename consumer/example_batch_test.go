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
	"github.com/hookbridge/hookbridge/schema"
)

// stock keeps a warehouse's stock levels from stock.adjusted webhooks
// ({"sku": "A-1", "delta": -2}). A stock level is a sum, so a batch of
// adjustments is applied set-wise: one statement adds each SKU's total,
// whatever the batch's size, with the effect of applying them one by one.
type stock struct{}

type adjustment struct {
	SKU   string `json:"sku"`
	Delta int64  `json:"delta"`
}

// Handle applies one event on its own (the per-event path, which the
// event a failed batch is narrowed down to takes): the same statement with
// one row.
func (stock) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	return stock{}.HandleBatch(ctx, tx, []consumer.Event{ev})
}

// HandleBatch applies the batch's new events (the inbox has already
// dropped duplicates). A body it cannot read is named with FailedAt, so
// the consumer applies the others and dead-letters that one alone.
func (stock) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	skus, deltas := make([]string, len(evs)), make([]int64, len(evs))
	for i, ev := range evs {
		var a adjustment
		if err := json.Unmarshal(ev.Body, &a); err != nil || a.SKU == "" {
			return consumer.FailedAt(i, consumer.Permanent(fmt.Errorf("stock.adjusted %s: unreadable body", ev.ID)))
		}
		skus[i], deltas[i] = a.SKU, a.Delta
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO warehouse.stock (sku, quantity)
		SELECT sku, sum(delta) FROM unnest($1::text[], $2::bigint[]) AS u(sku, delta) GROUP BY sku
		ON CONFLICT (sku) DO UPDATE SET quantity = stock.quantity + excluded.quantity`, skus, deltas)
	return err
}

var warehouse = schema.Set{Name: "warehouse", FS: fstest.MapFS{
	"0001_stock.sql": {Data: []byte(`CREATE SCHEMA warehouse;
CREATE TABLE warehouse.stock (sku text PRIMARY KEY, quantity bigint NOT NULL);`)},
}}

// A batch of five deliveries, applied as serve applies a batch: the
// repeat of evt-1 is a duplicate, never handed to the handler; the
// unreadable one fails alone with a permanent error (serve dead-letters it
// at once), and the other three are applied around it.
func ExampleBatchHandler() {
	var h consumer.BatchHandler = stock{}
	hookbridgetest.Example(func(t testing.TB) {
		db := hookbridgetest.Postgres(t, warehouse)
		ev := func(id, body string) consumer.Event {
			return hookbridgetest.NewEvent("wms", id, "stock.adjusted", []byte(body))
		}
		results := db.Apply(t, h,
			ev("evt-1", `{"sku":"A-1","delta":10}`),
			ev("evt-2", `{"sku":"B-7","delta":4}`),
			ev("evt-1", `{"sku":"A-1","delta":10}`),
			ev("evt-3", `not json`),
			ev("evt-4", `{"sku":"A-1","delta":-3}`))
		fmt.Println(hookbridgetest.Outcomes(results))
		fmt.Println("evt-3 permanent:", consumer.IsPermanent(results[3].Err))
		rows, err := db.Pool.Query(context.Background(), `SELECT sku, quantity FROM warehouse.stock ORDER BY sku`)
		if err != nil {
			t.Fatal(err)
		}
		var sku string
		var quantity int64
		if _, err := pgx.ForEachRow(rows, []any{&sku, &quantity}, func() error {
			fmt.Println(sku, quantity)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	// Output:
	// [processed processed duplicate failed processed]
	// evt-3 permanent: true
	// A-1 7
	// B-7 4
}
