package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/publisher"
)

// outboxTables are the outbox's two tables.
var outboxTables = []string{"hookbridge.outbox_rows", "hookbridge.outbox_packs"}

// BenchmarkOutboxRowSize measures the outbox's bytes per message (both
// tables' heap, TOAST and every index, per message) for orders-shaped
// messages (a ~140-byte payload, an ordering key, no extra headers)
// written with EnqueueBatch 64 per transaction, one row each ("rows": a
// caller that does not own the ids) or as packs ("packs": a transaction
// that claimed the events in the inbox, as a consumer's apply does), in
// three states:
//
//   - pending: 100k messages written, relay not running;
//   - sent: the relay has published and marked all of them, no vacuum
//     yet (what a busy system looks like between autovacuum runs);
//   - steady: another 200k written while the relay runs, with the
//     server's autovacuum replaced by VACUUM run exactly when autovacuum
//     would start one, by its thresholds for each table (the table's own
//     settings, else the server's): dead versions are reclaimed and
//     their space reused at the pace the schema asks for, without the
//     timing noise of the real daemon.
//
// b.N is ignored; run it with -benchtime=1x. Per-relation figures are
// logged with -v.
func BenchmarkOutboxRowSize(b *testing.B) {
	for _, mode := range []string{"rows", "packs"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				outboxSize(b, mode == "packs")
			}
		})
	}
}

func outboxSize(b *testing.B, packed bool) {
	const rows = 100_000
	db := hookbridgetest.Postgres(b)
	ns := hookbridgetest.NATS(b)
	ctx := context.Background()
	write := func(from, rows int) {
		msgs := make([]publisher.Message, 64)
		for i := from; i < from+rows; i += len(msgs) {
			batch := msgs[:min(len(msgs), from+rows-i)]
			for j := range batch {
				batch[j] = applied(fmt.Sprintf("evt-%08d", i+j), fmt.Sprintf("o-%08d", i+j))
				batch[j].Payload = fmt.Appendf(nil, `{"type":"orders.created","order_id":"o-%08d","amount_cents":1000,"currency":"EUR","cause":{"source":"demo","event_id":"evt-%08d"}}`, i+j, i+j)
			}
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				if packed {
					if err := claimEvents(ctx, tx, batch); err != nil {
						return err
					}
				}
				return publisher.EnqueueBatch(ctx, tx, batch)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	measure := func(state string) {
		var total, n int64
		if err := db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('hookbridge.outbox_rows') + pg_total_relation_size('hookbridge.outbox_packs'),
			(SELECT count(*) FROM hookbridge.outbox)`).Scan(&total, &n); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(total)/float64(n), "B/msg-"+state)
		rs, err := db.Pool.Query(ctx, `
			SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c, unnest($1::regclass[]) AS t(oid)
			WHERE c.oid = t.oid OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = t.oid)
			   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = t.oid)
			ORDER BY 1`, outboxTables)
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
			if size > 0 {
				parts = append(parts, fmt.Sprintf("%s=%.0f", name, float64(size)/float64(n)))
			}
		}
		if err := rs.Err(); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %d messages, %.0f B/message: %s", state, n, float64(total)/float64(n), strings.Join(parts, " "))
	}
	allSent := func(want int) {
		hookbridgetest.Eventually(b, 5*time.Minute, "every message sent", func() bool {
			return db.Count(b, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == want
		})
	}
	vac := newVacuumer(b, db)
	write(0, rows)
	measure("pending")
	r := relay.NewRelay(db.Pool, ns.JS, relay.Options{PollInterval: 100 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	allSent(rows)
	measure("sent")
	const chunk = 4_000
	for from := rows; from < 3*rows; from += chunk {
		write(from, chunk)
		vac.run()
	}
	allSent(3 * rows)
	vac.run()
	measure("steady")
	b.Logf("steady: %d vacuums", vac.vacuums)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// vacuumer runs VACUUM on an outbox table when autovacuum would start one
// on it (its thresholds: the table's own settings, else the server's), and
// turns the real autovacuum off for both.
type vacuumer struct {
	b       *testing.B
	db      *hookbridgetest.Database
	limits  map[string][4]float64 // vacuum threshold, scale factor, insert threshold, insert scale factor
	vacuums int
}

func newVacuumer(b *testing.B, db *hookbridgetest.Database) *vacuumer {
	v := &vacuumer{b: b, db: db, limits: map[string][4]float64{}}
	ctx := context.Background()
	for _, table := range outboxTables {
		var l [4]float64
		if err := db.Pool.QueryRow(ctx, `
			WITH o AS (SELECT split_part(opt, '=', 1) AS k, split_part(opt, '=', 2)::float8 AS v
			           FROM pg_class, unnest(coalesce(reloptions, '{}')) opt WHERE oid = $1::regclass)
			SELECT coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_threshold'), current_setting('autovacuum_vacuum_threshold')::float8),
			       coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_scale_factor'), current_setting('autovacuum_vacuum_scale_factor')::float8),
			       coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_insert_threshold'), current_setting('autovacuum_vacuum_insert_threshold')::float8),
			       coalesce((SELECT v FROM o WHERE k = 'autovacuum_vacuum_insert_scale_factor'), current_setting('autovacuum_vacuum_insert_scale_factor')::float8)`,
			table).Scan(&l[0], &l[1], &l[2], &l[3]); err != nil {
			b.Fatal(err)
		}
		v.limits[table] = l
		if _, err := db.Pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`); err != nil {
			b.Fatal(err)
		}
	}
	return v
}

// autovacuum's trigger: dead tuples above threshold + scale factor x
// reltuples, or inserts since the last vacuum above the insert threshold +
// insert scale factor x reltuples.
func (v *vacuumer) run() {
	ctx := context.Background()
	// Counters as autovacuum reads them: flush this and other backends'
	// pending statistics first.
	time.Sleep(1100 * time.Millisecond)
	for _, table := range outboxTables {
		var dead, ins, reltuples float64
		if err := v.db.Pool.QueryRow(ctx, `
			SELECT s.n_dead_tup, s.n_ins_since_vacuum, greatest(c.reltuples, 0)
			FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
			WHERE s.relid = $1::regclass`, table).Scan(&dead, &ins, &reltuples); err != nil {
			v.b.Fatal(err)
		}
		l := v.limits[table]
		if dead > l[0]+l[1]*reltuples || ins > l[2]+l[3]*reltuples {
			if _, err := v.db.Pool.Exec(ctx, `VACUUM `+table); err != nil {
				v.b.Fatal(err)
			}
			v.vacuums++
		}
	}
}
