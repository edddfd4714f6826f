package publisher_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/internal/testenv"
	"github.com/hookbridge/hookbridge/publisher"
)

// BenchmarkEnqueue is the outbox write a handler adds to every apply:
// one Enqueue of an orders-sized payload inside an open transaction that
// is committed every 64 events, as a full consumer batch would be. "keyed"
// carries an ordering key (the per-key advisory lock and key_seq trigger
// run); "unkeyed" does not.
func BenchmarkEnqueue(b *testing.B) {
	payload := []byte(`{"type":"orders.created","order_id":"o-123456","amount_cents":1000,"currency":"EUR","cause":{"source":"demo","event_id":"evt-123456"}}`)
	for _, keyed := range []bool{false, true} {
		name := "unkeyed"
		if keyed {
			name = "keyed"
		}
		b.Run(name, func(b *testing.B) {
			db := testenv.Postgres(b)
			ctx := context.Background()
			var tx pgx.Tx
			commit := func() {
				if tx != nil {
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
					tx = nil
				}
			}
			n := 0
			for b.Loop() {
				if tx == nil {
					var err error
					if tx, err = db.Pool.Begin(ctx); err != nil {
						b.Fatal(err)
					}
				}
				m := publisher.Message{ID: fmt.Sprintf("bench-%s-%d", name, n), Subject: "events.orders.created", Payload: payload}
				if keyed {
					m.OrderingKey = fmt.Sprintf("o-%d", n)
				}
				if err := publisher.Enqueue(ctx, tx, m); err != nil {
					b.Fatal(err)
				}
				n++
				if n%64 == 0 {
					commit()
				}
			}
			commit()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
