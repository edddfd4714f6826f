package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

// Two EnqueueBatch calls of more messages than one statement writes
// (1024) that share keys in opposite orders across their statements do
// not deadlock: each takes all its keys' locks, sorted, before it
// writes. A third transaction holds a key that sorts before both, so
// that each call is inside its write when the other one starts.
func TestLargeBatchesSharingKeysDoNotDeadlock(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	a, b := "customer-a", "customer-b"
	var g string
	if err := db.Pool.QueryRow(ctx, `SELECT k FROM (SELECT 'gate-' || i AS k FROM generate_series(1, 10000) i) x
		WHERE hashtext(k) < least(hashtext($1), hashtext($2)) LIMIT 1`, a, b).Scan(&g); err != nil {
		t.Fatal(err)
	}
	gate, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Rollback(ctx)
	if _, err := gate.Exec(ctx, `SELECT hookbridge.outbox_lock_keys(ARRAY[$1])`, g); err != nil {
		t.Fatal(err)
	}
	batch := func(tx, first, second string) []publisher.Message {
		var out []publisher.Message
		for i := range 1024 {
			out = append(out, msg(fmt.Sprintf("%s-%d", tx, i), first))
		}
		return append(out, msg(tx+"-g", g), msg(tx+"-x", second))
	}
	errs := make(chan error, 2)
	for _, w := range []struct{ name, first, second string }{{"t1", a, b}, {"t2", b, a}} {
		go func() {
			errs <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				return publisher.EnqueueBatch(ctx, tx, batch(w.name, w.first, w.second))
			})
		}()
	}
	hookbridgetest.Eventually(t, time.Minute, "both writers waiting for a lock", func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`) >= 2
	})
	if err := gate.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				t.Fatalf("a batch was aborted as a deadlock: %v", err)
			}
			t.Fatal(err)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 2*1026 {
		t.Fatalf("outbox holds %d messages, want %d", n, 2*1026)
	}
}
