package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// BenchmarkRelay measures relay throughput from the start of one relay
// over b.N committed outbox rows until the last row's PubAck; it then
// checks every row got marked sent and stored once.
// "one-key" puts every row on the same ordering key: the worst case for
// ordering, published as one chain per round (an ack before the next).
// "per-row-keys" gives every row a key of its own, as the orders handlers
// do (one key per order): the key-head query runs for every row.
// Run with e.g. -benchtime=20000x.
func BenchmarkRelay(b *testing.B) {
	for _, c := range []struct {
		batch int
		key   string // ordering key of every row; "" = none, "*" = one per row
	}{
		{1, ""}, {32, ""}, {256, ""}, {256, "hot"},
		{64, "*"}, {256, "*"}, {512, "*"}, {1024, "*"}, {2048, "*"},
		{512, ""}, {1024, ""}, {2048, ""},
	} {
		name := fmt.Sprintf("batch=%d", c.batch)
		switch c.key {
		case "":
		case "*":
			name += "/per-row-keys"
		default:
			name += "/one-key"
		}
		b.Run(name, func(b *testing.B) {
			batch := c.batch
			db := hookbridgetest.Postgres(b)
			ns := hookbridgetest.NATS(b)
			ctx := context.Background()
			opts := relay.Options{BatchSize: batch, PollInterval: time.Minute}
			r := relay.NewRelay(db.Pool, ns.JS, opts)
			var acked atomic.Int64
			allAcked := make(chan struct{})
			relay.SetAcked(r, func(string, *jetstream.PubAck) {
				if acked.Add(1) == int64(b.N) {
					close(allAcked)
				}
			})
			// Rows are written before the relay starts, 1,000 per
			// transaction (a transaction takes one advisory lock per
			// ordering key, and the lock table is finite).
			for from := 1; from <= b.N; from += 1000 {
				if _, err := db.Pool.Exec(ctx, `
					INSERT INTO hookbridge.outbox_rows (event_id, subject, payload, headers, ordering_key)
					SELECT 'bench-' || i, 'events.bench.created', convert_to(repeat('x', 200), 'UTF8'),
					       '{"Content-Type": "application/json"}',
					       CASE $3 WHEN '' THEN NULL WHEN '*' THEN 'o-' || i ELSE $3 END
					FROM generate_series($1::int, $2::int) i`, from, min(from+999, b.N), c.key); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			runRelay(b, r)
			select {
			case <-allAcked:
			case <-time.After(10 * time.Minute):
				b.Fatalf("only %d of %d rows acknowledged", acked.Load(), b.N)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
			hookbridgetest.Eventually(b, time.Minute, "all rows marked sent", func() bool {
				return db.Count(b, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == b.N
			})
			if got := ns.StreamMsgs(b, stream.Events); got != uint64(b.N) {
				b.Fatalf("stream holds %d msgs, want %d", got, b.N)
			}
		})
	}
}
