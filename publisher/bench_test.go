package publisher_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/internal/testenv"
	"github.com/hookbridge/hookbridge/publisher"
)

// BenchmarkRelay measures relay throughput from the commit of b.N outbox
// rows (one transaction) until the last row's PubAck, with one relay woken
// by NOTIFY; it then checks every row got marked sent and stored once.
// "one-key" puts every row on the same ordering key: the worst case for
// ordering, published as one chain per round (an ack before the next).
// Run with e.g. -benchtime=20000x.
func BenchmarkRelay(b *testing.B) {
	for _, c := range []struct {
		batch int
		key   string // ordering key of every row; "" = none
	}{{1, ""}, {32, ""}, {256, ""}, {256, "hot"}} {
		name := fmt.Sprintf("batch=%d", c.batch)
		if c.key != "" {
			name += "/one-key"
		}
		b.Run(name, func(b *testing.B) {
			batch := c.batch
			db := testenv.Postgres(b)
			ns := testenv.NATS(b)
			ctx := context.Background()
			opts := publisher.RelayOptions{BatchSize: batch, PollInterval: time.Minute}
			r := publisher.NewRelay(db.Pool, ns.JS, opts)
			listening := make(chan struct{}, 10)
			publisher.SetListening(r, func() { listening <- struct{}{} })
			var acked atomic.Int64
			allAcked := make(chan struct{})
			publisher.SetAcked(r, func(string, *jetstream.PubAck) {
				if acked.Add(1) == int64(b.N) {
					close(allAcked)
				}
			})
			runRelay(b, r)
			<-listening

			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO hookbridge.outbox (event_id, subject, payload, headers, ordering_key)
				SELECT 'bench-' || i, 'events.bench.created', convert_to(repeat('x', 200), 'UTF8'),
				       '{"Content-Type": "application/json"}', nullif($2, '')
				FROM generate_series(1, $1) i`, b.N, c.key); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			select {
			case <-allAcked:
			case <-time.After(10 * time.Minute):
				b.Fatalf("only %d of %d rows acknowledged", acked.Load(), b.N)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
			testenv.Eventually(b, time.Minute, "all rows marked sent", func() bool {
				return db.Count(b, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == b.N
			})
			if got := ns.StreamMsgs(b, stream.Events); got != uint64(b.N) {
				b.Fatalf("stream holds %d msgs, want %d", got, b.N)
			}
		})
	}
}
