package relay_test

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/publisher"
	"github.com/hookbridge/hookbridge/schema"
)

// Statements of the version before packs (migration 0008), as its binary
// sends them: a rolling upgrade runs them against the new schema.
const (
	prevInsertOne = `INSERT INTO hookbridge.outbox (event_id, subject, headers, payload, ordering_key)
		VALUES ($1, $2, $3::jsonb, $4, $5) ON CONFLICT DO NOTHING`
	prevClaim = `SELECT id, event_id, ordering_key FROM hookbridge.outbox
		WHERE status = 'pending' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED`
	prevKeyHeads = `SELECT u.k, p.id FROM unnest($1::text[], $2::int[]) AS u(k, n)
		CROSS JOIN LATERAL (
			SELECT o.id, o.next_attempt_at, o.key_seq FROM hookbridge.outbox o
			WHERE o.status = 'pending' AND o.ordering_key = u.k ORDER BY o.key_seq, o.id LIMIT u.n) AS p
		ORDER BY u.k, p.key_seq, p.id`
	prevMarkSent = `UPDATE hookbridge.outbox o SET status = 'sent', sent_at = clock_timestamp(), stream_seq = u.seq
		FROM unnest($1::bigint[], $2::bigint[]) AS u(id, seq) WHERE o.id = u.id`
	prevMarkFailed = `UPDATE hookbridge.outbox o
		SET attempts = o.attempts + CASE WHEN u.counted THEN 1 ELSE 0 END, last_error = u.err,
		    status = CASE WHEN u.permanent OR (u.counted AND o.attempts + 1 >= $5) THEN 'dead' ELSE 'pending' END,
		    next_attempt_at = clock_timestamp() + u.delay_us * interval '1 microsecond'
		FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bool[], $6::bool[]) AS u(id, err, delay_us, permanent, counted)
		WHERE o.id = u.id`
)

// coreUpTo is hookbridge's migration set up to version last.
func coreUpTo(t *testing.T, last string) schema.Set {
	t.Helper()
	core := schema.Core()
	files := fstest.MapFS{}
	err := fs.WalkDir(core.FS, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || name > last {
			return err
		}
		b, err := fs.ReadFile(core.FS, name)
		files[name] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return schema.Set{Name: core.Name, FS: files}
}

// An outbox of the version before packs migrates in place: its pending
// rows are published after the upgrade, in key order before anything
// written since, and its sent rows stay sent.
func TestUpgradeKeepsRowsWrittenBefore(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.EmptyPostgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	if _, err := schema.Migrate(ctx, db.Pool, coreUpTo(t, "0008")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old-1", "old-2", "old-3", "old-sent"} {
		if _, err := db.Pool.Exec(ctx, prevInsertOne, id, "events.test.created", nil, []byte("payload of "+id), "K"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE hookbridge.outbox SET status = 'sent', sent_at = now(), stream_seq = 1 WHERE event_id = 'old-sent'`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, db.Pool, schema.Core()); err != nil {
		t.Fatal(err)
	}
	enqueue(t, db.Pool, msg("new-row", "K"))
	enqueueApplied(t, db.Pool, applied("new-pack", "K"))

	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	runRelay(t, r)
	hookbridgetest.Eventually(t, time.Minute, "all published", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == 6
	})
	var ids []string
	for _, m := range eventsMsgs(t, ns.JS) {
		ids = append(ids, m.id)
	}
	want := []string{"old-1", "old-2", "old-3", "new-row", publisher.DerivedID(packConsumer, packSource, "new-pack")}
	if !slices.Equal(ids, want) {
		t.Fatalf("stream order %v, want %v", ids, want)
	}
	if s := row(t, db, "old-sent"); s.status != "sent" || s.streamSeq == nil || *s.streamSeq != 1 {
		t.Fatalf("row sent before the upgrade = %+v", s)
	}
	var ordered bool
	if err := db.Pool.QueryRow(ctx, `SELECT bool_and(prev < id) FROM (SELECT id, lag(id) OVER (ORDER BY key_seq) AS prev
		FROM hookbridge.outbox) AS o WHERE prev IS NOT NULL`).Scan(&ordered); err != nil || !ordered {
		t.Fatalf("ids do not grow with key_seq across the upgrade (%v)", err)
	}
}

// A relay and a writer of the version before packs keep working during a
// rolling upgrade: their statements on hookbridge.outbox go through the
// view, a pack's messages included (marking one moves its pack to rows).
// The view takes no row locks, so such a relay may publish a message a
// new relay publishes too; JetStream's de-duplication absorbs that.
func TestPreviousVersionStatementsWorkThroughTheView(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	enqueueApplied(t, db.Pool, applied("p1", "K"), applied("p2", ""))
	tag, err := db.Pool.Exec(ctx, prevInsertOne, "r1", "events.test.created", `{"X-A": "b"}`, []byte("payload of r1"), "K")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("previous insert = %v, %v", tag, err)
	}
	if tag, err := db.Pool.Exec(ctx, prevInsertOne, "r1", "events.test.created", nil, []byte("x"), "K"); err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("previous insert of a taken id = %v, %v; want nothing inserted", tag, err)
	}

	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, prevClaim, 10)
		if err != nil {
			return err
		}
		claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
			var id int64
			var eventID string
			var key *string
			return id, r.Scan(&id, &eventID, &key)
		})
		if err != nil || len(claimed) != 3 {
			t.Errorf("previous claim = %v, %v; want 3 messages", claimed, err)
			return err
		}
		heads, err := tx.Query(ctx, prevKeyHeads, []string{"K"}, []int32{3})
		if err != nil {
			return err
		}
		if n := len(collectIDs(t, heads)); n != 2 {
			t.Errorf("previous key heads: %d, want 2", n)
		}
		seqs := make([]int64, len(claimed))
		for i := range seqs {
			seqs[i] = int64(100 + i)
		}
		_, err = tx.Exec(ctx, prevMarkSent, claimed[:2], seqs[:2])
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, prevMarkFailed, claimed[2:], []string{"refused"}, []int64{0}, []bool{false}, 20, []bool{true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent' AND stream_seq >= 100`); n != 2 {
		t.Fatalf("sent through the view: %d, want 2", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending' AND attempts = 1 AND last_error = 'refused'`); n != 1 {
		t.Fatalf("failed through the view: %d, want 1", n)
	}
	if r, p := tables(t, db); r != 3 || p != 0 {
		t.Fatalf("rows %d, packs %d; want the pack moved to rows", r, p)
	}
	if tag, err := db.Pool.Exec(ctx, `DELETE FROM hookbridge.outbox WHERE event_id = 'r1'`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete through the view = %v, %v", tag, err)
	}
	if got := db.Outbox(t, ""); len(got) != 2 || !strings.HasSuffix(got[0].ID, ":p1") || !strings.HasSuffix(got[1].ID, ":p2") {
		t.Fatalf("outbox after the delete = %+v", got)
	}
}

func collectIDs(t *testing.T, rows pgx.Rows) []int64 {
	t.Helper()
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var k string
		var id int64
		return id, r.Scan(&k, &id)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
