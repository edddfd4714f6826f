package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

// sqlEnqueue calls hookbridge.enqueue in a transaction of its own.
func sqlEnqueue(t *testing.T, db *hookbridgetest.Database, id, subject, payload string, key any) error {
	t.Helper()
	ctx := context.Background()
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT hookbridge.enqueue($1, $2, $3::jsonb, $4)", id, subject, payload, key)
		return err
	})
}

// outboxRow is the part of an outbox row both writers set.
type outboxRow struct {
	subject      string
	headers      string // "<null>" for NULL
	payload      string
	orderingKey  string // "<null>" for NULL
	hasKeySeq    bool
	status       string
	attemptsZero bool
}

func readOutbox(t *testing.T, db *hookbridgetest.Database, id string) outboxRow {
	t.Helper()
	var r outboxRow
	err := db.Pool.QueryRow(context.Background(), `SELECT subject, coalesce(headers::text, '<null>'), convert_from(payload, 'UTF8'), coalesce(ordering_key, '<null>'),
		key_seq IS NOT NULL, status, attempts = 0 FROM hookbridge.outbox WHERE event_id = $1`, id).
		Scan(&r.subject, &r.headers, &r.payload, &r.orderingKey, &r.hasKeySeq, &r.status, &r.attemptsZero)
	if err != nil {
		t.Fatalf("outbox row %s: %v", id, err)
	}
	return r
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// hookbridge.enqueue writes the row publisher.Enqueue writes, and
// answers repeats as Enqueue does: the same content is a no-op, other
// content an error, across the two writers too.
func TestEnqueueFunctionHasEnqueueSemantics(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	payload := `{"a": 1, "b": [true, null]}` // jsonb's own text form, so the bytes compare equal

	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(ctx, tx, publisher.Message{ID: "go-1", Subject: "events.crm.ticket_closed", Payload: []byte(payload), OrderingKey: "t-1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlEnqueue(t, db, "sql-1", "events.crm.ticket_closed", payload, "t-1"); err != nil {
		t.Fatal(err)
	}
	goRow, sqlRow := readOutbox(t, db, "go-1"), readOutbox(t, db, "sql-1")
	if goRow != sqlRow || sqlRow.headers != "<null>" || sqlRow.orderingKey != "t-1" || !sqlRow.hasKeySeq || sqlRow.status != "pending" {
		t.Fatalf("rows differ or are wrong:\n Enqueue:            %+v\n hookbridge.enqueue: %+v", goRow, sqlRow)
	}

	// Same id, same content: no-op, from SQL and after a Go write alike.
	for _, id := range []string{"sql-1", "go-1"} {
		if err := sqlEnqueue(t, db, id, "events.crm.ticket_closed", `{"b":[true,null],"a":1}`, "t-1"); err != nil {
			t.Fatalf("repeat of %s: %v", id, err)
		}
	}
	// Same id, other payload or subject: an error, and nothing changes.
	for _, c := range []struct{ subject, payload string }{
		{"events.crm.ticket_closed", `{"a": 2}`},
		{"events.crm.other", payload},
	} {
		err := sqlEnqueue(t, db, "sql-1", c.subject, c.payload, nil)
		if err == nil || !strings.Contains(err.Error(), "outbox event id reused with different content") || sqlState(err) != "23505" {
			t.Fatalf("reuse with %s %s: err = %v, want reuse error (23505)", c.subject, c.payload, err)
		}
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.outbox"); n != 2 {
		t.Fatalf("outbox rows = %d, want 2", n)
	}
	if r := readOutbox(t, db, "sql-1"); r != sqlRow {
		t.Fatalf("row changed by a refused enqueue: %+v", r)
	}

	// An empty key is no key, as in Enqueue.
	if err := sqlEnqueue(t, db, "sql-2", "events.x", `{}`, ""); err != nil {
		t.Fatal(err)
	}
	if r := readOutbox(t, db, "sql-2"); r.orderingKey != "<null>" || r.hasKeySeq {
		t.Fatalf("empty key stored as %v (key_seq %v), want NULL", r.orderingKey, r.hasKeySeq)
	}
	// The three-argument form.
	if _, err := db.Pool.Exec(ctx, "SELECT hookbridge.enqueue('sql-3', 'events.x', '{}'::jsonb)"); err != nil {
		t.Fatal(err)
	}
}

// The checks of publisher.Enqueue's validate, with permanent SQLSTATEs.
func TestEnqueueFunctionRefusesBadInput(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	for _, c := range []struct{ id, subject string }{
		{"", "events.x"},
		{"has space", "events.x"},
		{strings.Repeat("a", 256), "events.x"},
		{"ok", "orders.x"},
		{"ok", "events."},
		{"ok", "events.a..b"},
		{"ok", "events.a.*"},
		{"ok", "events." + strings.Repeat("a", 65)},
		{"ok", "events." + strings.Repeat("abcdefghi.", 20) + "x"},
	} {
		err := sqlEnqueue(t, db, c.id, c.subject, `{}`, nil)
		if err == nil || sqlState(err) != "22023" {
			t.Errorf("enqueue(%q, %q): err = %v, want 22023", c.id, c.subject, err)
		}
	}
	if err := sqlEnqueue(t, db, "ok", "events.x", "null", nil); err != nil {
		t.Errorf("JSON null payload: %v", err) // a JSON value, stored as "null" like Enqueue would store it
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.outbox"); n != 1 {
		t.Fatalf("outbox rows = %d, want 1", n)
	}
}

// A committed hookbridge.enqueue notifies the relays' channel, as an
// Enqueue does; a rolled-back one does not.
func TestEnqueueFunctionWakesRelay(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN hookbridge_outbox"); err != nil {
		t.Fatal(err)
	}
	rollback := errors.New("rolled back")
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT hookbridge.enqueue('r-1', 'events.x', '{}')"); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	// A marker sent after the rollback must be the first notification:
	// waiting for "none" with a deadline would close the connection.
	if _, err := db.Pool.Exec(ctx, "SELECT pg_notify('hookbridge_outbox', 'marker')"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute) // each wait ends with its notification
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wctx)
	if err != nil || n.Payload != "marker" {
		t.Fatalf("first notification %+v, %v; want the marker (a rolled-back enqueue must not notify)", n, err)
	}
	if err := sqlEnqueue(t, db, "c-1", "events.x", `{}`, nil); err != nil {
		t.Fatal(err)
	}
	n, err = conn.Conn().WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification after a committed enqueue: %v", err)
	}
	if n.Channel != "hookbridge_outbox" || n.Payload != "" {
		t.Fatalf("notification %+v, want the outbox trigger's", n)
	}
}
