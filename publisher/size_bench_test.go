package publisher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

// BenchmarkOutboxRowSize measures the outbox's bytes per row (heap, TOAST
// and every index: pg_total_relation_size / rows) for orders-shaped rows
// (a ~140-byte payload, an ordering key, no extra headers) written with
// EnqueueBatch 64 per transaction, in three states:
//
//   - pending: 100k rows written, relay not running;
//   - sent: the relay has published and marked all of them, no vacuum
//     yet (what a busy system looks like between autovacuum runs);
//   - steady: another 200k written while the relay runs, with the
//     server's autovacuum replaced by VACUUM run exactly when autovacuum
//     would start one, by its thresholds for this table (the table's own
//     settings, else the server's): dead versions are reclaimed and
//     their space reused at the pace the schema asks for, without the
//     timing noise of the real daemon.
//
// b.N is ignored; run it with -benchtime=1x. Per-relation figures are
// logged with -v.
func BenchmarkOutboxRowSize(b *testing.B) {
	const rows = 100_000
	for b.Loop() {
		db := hookbridgetest.Postgres(b)
		ns := hookbridgetest.NATS(b)
		ctx := context.Background()
		write := func(from, rows int) {
			payload := func(i int) []byte {
				return fmt.Appendf(nil, `{"type":"orders.created","order_id":"o-%08d","amount_cents":1000,"currency":"EUR","cause":{"source":"demo","event_id":"evt-%08d"}}`, i, i)
			}
			msgs := make([]publisher.Message, 64)
			for i := from; i < from+rows; i += len(msgs) {
				batch := msgs[:min(len(msgs), from+rows-i)]
				for j := range batch {
					batch[j] = publisher.Message{ID: fmt.Sprintf("orders:demo:evt-%08d", i+j), Subject: "events.orders.created",
						Payload: payload(i + j), OrderingKey: fmt.Sprintf("o-%08d", i+j)}
				}
				if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return publisher.EnqueueBatch(ctx, tx, batch) }); err != nil {
					b.Fatal(err)
				}
			}
		}
		measure := func(state string) {
			var total, n int64
			if err := db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('hookbridge.outbox'), count(*) FROM hookbridge.outbox`).Scan(&total, &n); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(total)/float64(n), "B/row-"+state)
			rs, err := db.Pool.Query(ctx, `
				SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
				WHERE c.oid = 'hookbridge.outbox'::regclass OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = 'hookbridge.outbox'::regclass)
				   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'hookbridge.outbox'::regclass)
				ORDER BY 1`)
			if err != nil {
				b.Fatal(err)
			}
			var parts []string
			for rs.Next() {
				var name string
				var size int64
				if err := rs.Scan(&name, &size); err != nil {
					b.Fatal(err)
				}
				parts = append(parts, fmt.Sprintf("%s=%.0f", name, float64(size)/float64(n)))
			}
			if err := rs.Err(); err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: %d rows, %.0f B/row: %s", state, n, float64(total)/float64(n), strings.Join(parts, " "))
		}
		allSent := func(want int) {
			hookbridgetest.Eventually(b, 5*time.Minute, "every row sent", func() bool {
				return db.Count(b, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == want
			})
		}
		// autovacuum's trigger: dead tuples above threshold + scale factor
		// x reltuples, or inserts since the last vacuum above the insert
		// threshold + insert scale factor x reltuples.
		var vacT, vacSF, insT, insSF float64
		if err := db.Pool.QueryRow(ctx, `
			WITH o AS (SELECT split_part(opt, '=', 1) AS k, split_part(opt, '=', 2)::float8 AS v
			           FROM pg_class, unnest(coalesce(reloptions, '{}')) opt WHERE oid = 'hookbridge.outbox'::regclass)
			SELECT coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_threshold'), current_setting('autovacuum_vacuum_threshold')::float8),
			       coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_scale_factor'), current_setting('autovacuum_vacuum_scale_factor')::float8),
			       coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_insert_threshold'), current_setting('autovacuum_vacuum_insert_threshold')::float8),
			       coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_insert_scale_factor'), current_setting('autovacuum_vacuum_insert_scale_factor')::float8)`).
			Scan(&vacT, &vacSF, &insT, &insSF); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `ALTER TABLE hookbridge.outbox SET (autovacuum_enabled = false)`); err != nil {
			b.Fatal(err)
		}
		vacuums := 0
		autovacuum := func() {
			// Counters as autovacuum reads them: flush this and other
			// backends' pending statistics first.
			time.Sleep(1100 * time.Millisecond)
			var dead, ins, reltuples float64
			if err := db.Pool.QueryRow(ctx, `
				SELECT s.n_dead_tup, s.n_ins_since_vacuum, greatest(c.reltuples, 0)
				FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
				WHERE s.relid = 'hookbridge.outbox'::regclass`).Scan(&dead, &ins, &reltuples); err != nil {
				b.Fatal(err)
			}
			if dead > vacT+vacSF*reltuples || ins > insT+insSF*reltuples {
				if _, err := db.Pool.Exec(ctx, `VACUUM hookbridge.outbox`); err != nil {
					b.Fatal(err)
				}
				vacuums++
			}
		}

		write(0, rows)
		measure("pending")
		r := publisher.NewRelay(db.Pool, ns.JS, publisher.RelayOptions{PollInterval: 100 * time.Millisecond})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		allSent(rows)
		measure("sent")
		const chunk = 4_000
		for from := rows; from < 3*rows; from += chunk {
			write(from, chunk)
			autovacuum()
		}
		allSent(3 * rows)
		autovacuum()
		measure("steady")
		b.Logf("steady: %d vacuums (threshold %.0f + %.2f x rows)", vacuums, vacT, vacSF)
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
