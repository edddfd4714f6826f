package publisher_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/internal/testenv"
	"github.com/hookbridge/hookbridge/publisher"
)

func createOrders(t *testing.T, db *testenv.Database) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// A failure between the business insert and the outbox insert, or after
// both, rolls back both: there is never an event without its change.
func TestEnqueueRollsBackWithBusinessChange(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	createOrders(t, db)
	ctx := context.Background()
	boom := errors.New("handler failed")

	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o-1', 10)`); err != nil {
			return err
		}
		return boom // before Enqueue
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o-2', 20)`); err != nil {
			return err
		}
		if err := publisher.Enqueue(ctx, tx, msg("ev-2", "o-2")); err != nil {
			return err
		}
		return boom // after Enqueue, before commit
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Errorf("orders = %d, want 0", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 0 {
		t.Errorf("outbox rows = %d, want 0", n)
	}
}

func TestEnqueueCommitsWithBusinessChange(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	createOrders(t, db)
	ctx := context.Background()

	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o-1', 10)`); err != nil {
			return err
		}
		m := msg("ev-1", "o-1")
		m.Header = map[string]string{"Content-Type": "application/json"}
		if err := publisher.Enqueue(ctx, tx, m); err != nil {
			return err
		}
		// Re-running the same logical operation is a no-op.
		return publisher.Enqueue(ctx, tx, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := db.Count(t, `SELECT count(*) FROM orders`); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending' AND attempts = 0
		AND event_id = 'ev-1' AND ordering_key = 'o-1' AND key_seq IS NOT NULL
		AND headers = '{"Content-Type": "application/json"}'::jsonb`); n != 1 {
		t.Errorf("pending outbox rows = %d, want 1", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 1 {
		t.Errorf("outbox rows = %d, want 1", n)
	}
}

func TestEnqueueRefusesBadHeaders(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, h := range []map[string]string{
		{"Nats-Msg-Id": "other"},
		{"nats-expected-stream": "X"},
		{"Bad Name": "v"},
		{"X-Ok": "line\r\nbreak"},
	} {
		m := msg("ev-h", "")
		m.Header = h
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return publisher.Enqueue(ctx, tx, m) })
		if err == nil || !strings.Contains(err.Error(), "header") {
			t.Errorf("header %v: err = %v, want a header error", h, err)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 0 {
		t.Errorf("outbox rows = %d, want 0", n)
	}
}

// Writers of one ordering key serialise from their outbox insert to their
// commit, so key_seq follows commit order; other keys are not held up.
func TestOrderingKeyWritersSerialise(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()

	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx) //nolint:errcheck
	if err := publisher.Enqueue(ctx, first, msg("k-first", "K")); err != nil {
		t.Fatal(err)
	}

	// Another key commits while the first transaction is open.
	enqueue(t, db.Pool, msg("other-key", "L"), msg("no-key", ""))

	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return publisher.Enqueue(ctx, tx, msg("k-second", "K"))
		})
	}()
	select {
	case err := <-second:
		t.Fatalf("second writer of key K finished while the first was open: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox a, hookbridge.outbox b
		WHERE a.event_id = 'k-first' AND b.event_id = 'k-second' AND a.key_seq < b.key_seq`); n != 1 {
		t.Fatalf("key_seq of the first commit is not below the second's")
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE event_id = 'no-key' AND key_seq IS NULL AND ordering_key IS NULL`); n != 1 {
		t.Fatalf("unkeyed row got a key_seq")
	}
}
