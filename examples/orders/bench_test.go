package orders

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// BenchmarkApply applies runs of 64 events (order.created of new orders,
// then order.paid of the same orders) in one transaction each, per event
// (Handle: the order's statement and the outbox insert, per event) or
// set-wise (HandleBatch: the same two statements per run).
func BenchmarkApply(b *testing.B) {
	for _, setwise := range []bool{false, true} {
		name := "per-event"
		if setwise {
			name = "set-wise"
		}
		b.Run(name, func(b *testing.B) {
			db := hookbridgetest.Postgres(b, Migrations())
			ctx := context.Background()
			h := Handler("orders")
			const run = 64
			n := 0
			for b.Loop() {
				created, paid := make([]consumer.Event, run), make([]consumer.Event, run)
				for i := range run {
					o := fmt.Sprintf("o-%d", n+i)
					created[i] = event(fmt.Sprintf("c-%d", n+i), Created, orderBody(Created, o, 500, "EUR"))
					paid[i] = event(fmt.Sprintf("p-%d", n+i), Paid, orderBody(Paid, o, 500, "EUR"))
				}
				n += run
				err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					for _, evs := range [][]consumer.Event{created, paid} {
						if setwise {
							if err := h.HandleBatch(ctx, tx, evs); err != nil {
								return err
							}
							continue
						}
						for _, ev := range evs {
							if err := h.Handle(ctx, tx, ev); err != nil {
								return err
							}
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(2*n)/b.Elapsed().Seconds(), "events/s")
			if got := db.Count(b, `SELECT count(*) FROM demo.orders WHERE status = 'paid' AND version = 2`); got != n {
				b.Fatalf("paid orders = %d, want %d", got, n)
			}
		})
	}
}
