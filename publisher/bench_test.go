package publisher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/internal/testenv"
	"github.com/hookbridge/hookbridge/publisher"
)

// BenchmarkRelay measures relay throughput from the commit of b.N outbox
// rows (one transaction) until every row is PubAcked and marked sent, with
// one relay woken by NOTIFY. Run with e.g. -benchtime=20000x.
func BenchmarkRelay(b *testing.B) {
	for _, batch := range []int{1, 32, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db := testenv.Postgres(b)
			ns := testenv.NATS(b)
			ctx := context.Background()
			opts := publisher.RelayOptions{BatchSize: batch, PollInterval: time.Minute}
			r := publisher.NewRelay(db.Pool, ns.JS, opts)
			listening := make(chan struct{}, 10)
			publisher.SetListening(r, func() { listening <- struct{}{} })
			runRelay(b, r)
			<-listening

			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO hookbridge.outbox (event_id, subject, payload, headers)
				SELECT 'bench-' || i, 'events.bench.created', convert_to(repeat('x', 200), 'UTF8'),
				       '{"Content-Type": "application/json"}'
				FROM generate_series(1, $1) i`, b.N); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			for {
				var sent int
				if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`).Scan(&sent); err != nil {
					b.Fatal(err)
				}
				if sent == b.N {
					break
				}
				time.Sleep(time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
			if got := ns.StreamMsgs(b, stream.Events); got != uint64(b.N) {
				b.Fatalf("stream holds %d msgs, want %d", got, b.N)
			}
		})
	}
}
