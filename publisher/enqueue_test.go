package publisher_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

func createOrders(t *testing.T, db *hookbridgetest.Database) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// A failure between the business insert and the outbox insert, or after
// both, rolls back both: there is never an event without its change.
func TestEnqueueRollsBackWithBusinessChange(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
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
	db := hookbridgetest.Postgres(t)
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
	db := hookbridgetest.Postgres(t)
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
	db := hookbridgetest.Postgres(t)
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
	hookbridgetest.Eventually(t, time.Minute, "the second writer waiting for the first", func() bool {
		select {
		case err := <-second:
			t.Fatalf("second writer of key K finished while the first was open: %v", err)
		default:
		}
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
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

// outboxRows reads the outbox as comparable text, in insertion (id) order,
// with key_seq replaced by its rank within the key.
func outboxRows(t *testing.T, db *hookbridgetest.Database) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT concat_ws('|', event_id, subject, coalesce(headers, '{}'::jsonb)::text, encode(payload, 'escape'),
		       coalesce(ordering_key, '-'), status, attempts,
		       CASE WHEN key_seq IS NULL THEN '-' ELSE (rank() OVER (PARTITION BY ordering_key ORDER BY key_seq))::text END)
		FROM hookbridge.outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// EnqueueBatch writes what the same messages enqueued one by one write:
// the same rows in the same order, the same key_seq order per key,
// repeats (inside the batch and of committed rows) as no-ops, context
// headers merged the same way.
func TestEnqueueBatchMatchesEnqueue(t *testing.T) {
	t.Parallel()
	ctx := publisher.WithHeaders(context.Background(), map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	withHeader := msg("b-hdr", "K")
	withHeader.Header = map[string]string{"Content-Type": "application/json", "traceparent": "own"}
	existing := msg("b-existing", "K")
	batch := []publisher.Message{
		msg("b-1", "K"), msg("b-2", ""), existing, msg("b-3", "L"), withHeader,
		msg("b-1", "K"), // repeat inside the batch, same content
		msg("b-4", "K"), msg("b-5", ""),
	}
	seq, set := hookbridgetest.Postgres(t), hookbridgetest.Postgres(t)
	for _, db := range []*hookbridgetest.Database{seq, set} {
		enqueue(t, db.Pool, existing)
	}
	err := pgx.BeginFunc(ctx, seq.Pool, func(tx pgx.Tx) error {
		for _, m := range batch {
			if err := publisher.Enqueue(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("one by one: %v", err)
	}
	if err := pgx.BeginFunc(ctx, set.Pool, func(tx pgx.Tx) error { return publisher.EnqueueBatch(ctx, tx, batch) }); err != nil {
		t.Fatalf("batch: %v", err)
	}
	a, b := outboxRows(t, seq), outboxRows(t, set)
	if len(a) != 7 || strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("one by one:\n%s\nbatch:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	// Enqueue with several messages is the batch path too.
	if err := pgx.BeginFunc(ctx, set.Pool, func(tx pgx.Tx) error { return publisher.Enqueue(ctx, tx, batch...) }); err != nil {
		t.Fatalf("variadic repeat: %v", err)
	}
	if n := set.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 7 {
		t.Fatalf("outbox rows after repeating the batch = %d, want 7", n)
	}
}

// A reused id fails the batch whether the earlier row is committed or
// earlier in the same batch; invalid messages fail it before anything is
// written.
func TestEnqueueBatchRefusesReusedIDsAndInvalidMessages(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	enqueue(t, db.Pool, msg("r-1", ""))
	changed := msg("r-1", "")
	changed.Payload = []byte("other payload")
	otherSubject := msg("r-2", "")
	otherSubject.Subject = "events.test.other"
	bad := msg("r-bad", "")
	bad.Subject = "orders.created"
	for name, c := range map[string]struct {
		msgs    []publisher.Message
		reused  bool
		errText string
	}{
		"committed id, other payload": {msgs: []publisher.Message{msg("r-0", ""), changed}, reused: true},
		"same id twice in the batch":  {msgs: []publisher.Message{msg("r-2", ""), otherSubject}, reused: true},
		"invalid subject":             {msgs: []publisher.Message{msg("r-3", ""), bad}, errText: "subject"},
		"invalid id":                  {msgs: []publisher.Message{msg("r-4", ""), msg("", "")}, errText: "invalid event id"},
	} {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return publisher.EnqueueBatch(ctx, tx, c.msgs) })
		switch {
		case c.reused && !errors.Is(err, publisher.ErrIDReused):
			t.Errorf("%s: err = %v, want ErrIDReused", name, err)
		case !c.reused && (err == nil || !strings.Contains(err.Error(), c.errText)):
			t.Errorf("%s: err = %v, want one naming %q", name, err, c.errText)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 1 {
		t.Fatalf("outbox rows = %d, want only the first committed one", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE payload = 'payload of r-1'`); n != 1 {
		t.Fatal("the committed row was changed")
	}
}

// Two transactions enqueueing the same id: the second waits for the first
// and, once it commits, finds its row and changes nothing.
func TestEnqueueBatchConcurrentSameID(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx) //nolint:errcheck
	if err := publisher.EnqueueBatch(ctx, first, []publisher.Message{msg("c-1", ""), msg("c-2", "")}); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return publisher.EnqueueBatch(ctx, tx, []publisher.Message{msg("c-3", ""), msg("c-2", "")})
		})
	}()
	hookbridgetest.Eventually(t, time.Minute, "the second writer waiting for the first", func() bool {
		select {
		case err := <-second:
			t.Fatalf("second writer of id c-2 finished while the first was open: %v", err)
		default:
		}
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second writer: %v", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 3 {
		t.Fatalf("outbox rows = %d, want 3", n)
	}
}
