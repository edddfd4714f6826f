package publisher_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/hookbridgetest"
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
			db := hookbridgetest.Postgres(b)
			ctx := context.Background()
			tx := &lazyTx{pool: db.Pool}
			n := 0
			for b.Loop() {
				m := publisher.Message{ID: fmt.Sprintf("bench-%s-%d", name, n), Subject: "events.orders.created", Payload: payload}
				if keyed {
					m.OrderingKey = fmt.Sprintf("o-%d", n)
				}
				if err := publisher.Enqueue(ctx, tx.get(b, ctx), m); err != nil {
					b.Fatal(err)
				}
				n++
				if n%64 == 0 {
					tx.commit(b, ctx)
				}
			}
			tx.commit(b, ctx)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkEnqueueBatch writes outbox rows n at a time inside open
// transactions committed every 256 rows, three ways:
//
//   - loop: one Enqueue (one INSERT round trip) per message, what a
//     handler did before EnqueueBatch existed;
//   - unnest: EnqueueBatch, one INSERT … SELECT FROM unnest(…) for the n;
//   - copy: the COPY alternative with the same semantics: a session
//     staging table, COPY into it, then one INSERT … SELECT … ON CONFLICT
//     DO NOTHING that empties it (COPY itself cannot skip existing ids).
//
// Every message carries an ordering key, as the orders handlers' do.
func BenchmarkEnqueueBatch(b *testing.B) {
	payload := []byte(`{"type":"orders.created","order_id":"o-123456","amount_cents":1000,"currency":"EUR","cause":{"source":"demo","event_id":"evt-123456"}}`)
	ways := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx, msgs []publisher.Message) error
	}{
		{"loop", func(ctx context.Context, tx pgx.Tx, msgs []publisher.Message) error {
			for _, m := range msgs {
				if err := publisher.Enqueue(ctx, tx, m); err != nil {
					return err
				}
			}
			return nil
		}},
		{"unnest", publisher.EnqueueBatch},
		{"copy", copyEnqueue},
	}
	for _, n := range []int{1, 64, 256} {
		for _, w := range ways {
			b.Run(fmt.Sprintf("n=%d/%s", n, w.name), func(b *testing.B) {
				db := hookbridgetest.Postgres(b)
				ctx := context.Background()
				tx := &lazyTx{pool: db.Pool}
				msgs := make([]publisher.Message, n)
				rows := 0
				for b.Loop() {
					for i := range msgs {
						msgs[i] = publisher.Message{ID: fmt.Sprintf("bench-%d", rows), Subject: "events.orders.created",
							Payload: payload, OrderingKey: fmt.Sprintf("o-%d", rows)}
						rows++
					}
					if err := w.fn(ctx, tx.get(b, ctx), msgs); err != nil {
						b.Fatal(err)
					}
					if rows%256 < n {
						tx.commit(b, ctx)
					}
				}
				tx.commit(b, ctx)
				b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(rows), "µs/row")
				if got := db.Count(b, `SELECT count(*) FROM hookbridge.outbox`); got != rows {
					b.Fatalf("outbox rows = %d, want %d", got, rows)
				}
			})
		}
	}
}

// copyEnqueue is the COPY way to write msgs with EnqueueBatch's effect on
// new ids (the benchmark writes only new ids, so it skips the comparison
// of repeats).
func copyEnqueue(ctx context.Context, tx pgx.Tx, msgs []publisher.Message) error {
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS outbox_stage
		(ord int, event_id text, subject text, headers jsonb, payload bytea, ordering_key text) ON COMMIT DELETE ROWS`); err != nil {
		return err
	}
	src := make([][]any, len(msgs))
	for i, m := range msgs {
		src[i] = []any{i, m.ID, m.Subject, "{}", m.Payload, m.OrderingKey}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox_stage"},
		[]string{"ord", "event_id", "subject", "headers", "payload", "ordering_key"}, pgx.CopyFromRows(src)); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `
		WITH s AS (DELETE FROM outbox_stage RETURNING *)
		INSERT INTO hookbridge.outbox_rows (event_id, subject, headers, payload, ordering_key)
		SELECT event_id, subject, headers, payload, nullif(ordering_key, '') FROM s ORDER BY ord
		ON CONFLICT DO NOTHING
		RETURNING event_id`)
	if err != nil {
		return err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(got) != len(msgs) {
		return fmt.Errorf("copy: inserted %d of %d", len(got), len(msgs))
	}
	return nil
}

// lazyTx is a transaction begun on first use and committed on demand, so
// that a benchmark keeps rows in open transactions and commits every so
// many.
type lazyTx struct {
	pool *pgxpool.Pool
	tx   pgx.Tx
}

func (l *lazyTx) get(b *testing.B, ctx context.Context) pgx.Tx {
	if l.tx == nil {
		var err error
		if l.tx, err = l.pool.Begin(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return l.tx
}

func (l *lazyTx) commit(b *testing.B, ctx context.Context) {
	if l.tx != nil {
		if err := l.tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		l.tx = nil
	}
}
