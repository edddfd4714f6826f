package sqlconsumer_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/sqlconsumer"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

// crm is the tickets schema the statements write to. runs logs every
// statement that ran, in order, so a test can count them.
func crm() schema.Set {
	return schema.Set{Name: "tickets", FS: fstest.MapFS{"0001_crm.sql": {Data: []byte(`
CREATE SCHEMA crm;
CREATE TABLE crm.tickets (
    issue_id     bigint PRIMARY KEY,
    title        text   NOT NULL,
    state        text   NOT NULL CHECK (state IN ('open', 'closed')),
    opened_event text   NOT NULL
);
CREATE TABLE crm.runs (
    n          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    what       text   NOT NULL,
    event_id   text   NOT NULL,
    event_type text   NOT NULL,
    source     text   NOT NULL,
    consumer   text   NOT NULL,
    stream_seq bigint NOT NULL,
    received   timestamptz NOT NULL
);
-- fail raises a plain (retryable) error when the body asks for one.
CREATE FUNCTION crm.fail(body jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF (body ->> 'fail')::boolean THEN
        RAISE EXCEPTION 'asked to fail';
    END IF;
END $$;
`)}}}
}

// apply is the contract of the spec's example, plus a fallback.
var apply = map[string][]string{
	"issues.opened": {`INSERT INTO crm.tickets (issue_id, title, state, opened_event)
		VALUES ((@body::jsonb #>> '{issue,id}')::bigint, @body::jsonb #>> '{issue,title}', 'open', @event_id)
		ON CONFLICT (issue_id) DO NOTHING`},
	"issues.closed": {
		`SELECT crm.fail(@body::jsonb)`,
		`INSERT INTO crm.runs (what, event_id, event_type, source, consumer, stream_seq, received)
		 SELECT 'close:' || state, @event_id, @event_type, @source, @consumer, @stream_seq, @received_at
		 FROM crm.tickets WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint`,
		`UPDATE crm.tickets SET state = 'closed' WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint`,
		`INSERT INTO crm.runs (what, event_id, event_type, source, consumer, stream_seq, received)
		 SELECT 'closed:' || state, @event_id, @event_type, @source, @consumer, @stream_seq, @received_at
		 FROM crm.tickets WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint`,
		`SELECT hookbridge.enqueue(@consumer || ':' || @source || ':' || @event_id, 'events.crm.ticket_closed', @body::jsonb)`,
	},
	"*": {`INSERT INTO crm.runs (what, event_id, event_type, source, consumer, stream_seq, received)
		VALUES ('other', @event_id, @event_type, @source, @consumer, @stream_seq, @received_at)`},
}

func newHandler(t *testing.T) *sqlconsumer.Handler {
	t.Helper()
	h, err := sqlconsumer.New("tickets", apply)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var received = time.Date(2026, 12, 1, 10, 11, 12, 345678000, time.UTC)

func event(seq uint64, id, typ, body string) consumer.Event {
	return consumer.Event{Source: "gh", ID: id, Type: typ, Body: []byte(body), BodySHA256: sha256.Sum256([]byte(body)),
		Subject: "hooks.gh." + typ, StreamSeq: seq, NumDelivered: 1, ReceivedAt: received}
}

func opened(seq uint64, id string, issue int, title string) consumer.Event {
	return event(seq, id, "issues.opened", fmt.Sprintf(`{"issue":{"id":%d,"title":%q}}`, issue, title))
}

func closed(seq uint64, id string, issue int) consumer.Event {
	return event(seq, id, "issues.closed", fmt.Sprintf(`{"issue":{"id":%d}}`, issue))
}

// runs are crm.runs in order, as "what event_id".
func runs(t *testing.T, db *hookbridgetest.Database) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT what || ' ' || event_id FROM crm.runs ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func applyOne(t *testing.T, db *hookbridgetest.Database, h consumer.Handler, ev consumer.Event) (consumer.Outcome, error) {
	t.Helper()
	return engine.Apply(context.Background(), db.Pool, "tickets", h, ev)
}

// Each apply rule: one statement, a list run in order, "*" for any other
// type; every named argument bound.
func TestApplyRules(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, crm())
	h := newHandler(t)
	for _, ev := range []consumer.Event{opened(1, "e1", 7, "crash"), closed(2, "e2", 7), event(3, "e3", "issues.labeled", `{}`)} {
		if out, err := applyOne(t, db, h, ev); out != consumer.Processed || err != nil {
			t.Fatalf("%s: %v, %v", ev.ID, out, err)
		}
	}
	var title, state, openedBy string
	if err := db.Pool.QueryRow(context.Background(), "SELECT title, state, opened_event FROM crm.tickets WHERE issue_id = 7").
		Scan(&title, &state, &openedBy); err != nil {
		t.Fatal(err)
	}
	if title != "crash" || state != "closed" || openedBy != "e1" {
		t.Fatalf("ticket = %q %q %q", title, state, openedBy)
	}
	// The list ran in order: the log line before the UPDATE saw it open.
	if got, want := strings.Join(runs(t, db), ", "), "close:open e2, closed:closed e2, other e3"; got != want {
		t.Fatalf("runs = %s, want %s", got, want)
	}
	var typ, src, cons string
	var seq int64
	var at time.Time
	if err := db.Pool.QueryRow(context.Background(), "SELECT event_type, source, consumer, stream_seq, received FROM crm.runs WHERE what = 'other'").
		Scan(&typ, &src, &cons, &seq, &at); err != nil {
		t.Fatal(err)
	}
	if typ != "issues.labeled" || src != "gh" || cons != "tickets" || seq != 3 || !at.Equal(received) {
		t.Fatalf("bound %q %q %q %d %s", typ, src, cons, seq, at)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.outbox WHERE event_id = 'tickets:gh:e2' AND subject = 'events.crm.ticket_closed'"); n != 1 {
		t.Fatalf("outbox rows = %d, want 1", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'tickets'"); n != 3 {
		t.Fatalf("inbox rows = %d, want 3", n)
	}
}

// A repeat and a conflict never run the statements, alone or in a batch.
func TestDuplicateAndConflictRunNothing(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, crm())
			h := newHandler(t)
			first := event(1, "e1", "issues.labeled", `{"n":1}`)
			evs := []consumer.Event{first, event(2, "e1", "issues.labeled", `{"n":1}`), event(3, "e1", "issues.labeled", `{"n":2}`)}
			var outs []consumer.Outcome
			if batch {
				for _, r := range engine.ApplyBatch(context.Background(), db.Pool, "tickets", h, evs) {
					outs = append(outs, r.Outcome)
				}
			} else {
				for _, ev := range evs {
					out, err := applyOne(t, db, h, ev)
					if err != nil {
						t.Fatal(err)
					}
					outs = append(outs, out)
				}
			}
			if fmt.Sprint(outs) != "[processed duplicate conflict]" {
				t.Fatalf("outcomes %v", outs)
			}
			if n := db.Count(t, "SELECT count(*) FROM crm.runs"); n != 1 {
				t.Fatalf("statements ran %d times, want 1", n)
			}
			if n := db.Count(t, "SELECT count(*) FROM hookbridge.conflicts WHERE detected_by = 'tickets'"); n != 1 {
				t.Fatalf("conflicts = %d, want 1", n)
			}
		})
	}
}

// A statement that fails rolls back the statements before it and the
// inbox claim; the redelivery, once the cause is gone, applies once.
func TestFailingStatementRollsBackInbox(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, crm())
	h := newHandler(t)
	if _, err := applyOne(t, db, h, opened(1, "e1", 7, "crash")); err != nil {
		t.Fatal(err)
	}
	bad := event(2, "e2", "issues.closed", `{"issue":{"id":7},"fail":true}`)
	out, err := applyOne(t, db, h, bad)
	if out != consumer.Failed || err == nil || !strings.Contains(err.Error(), "asked to fail") {
		t.Fatalf("apply = %v, %v; want failed with the function's message", out, err)
	}
	if consumer.IsPermanent(err) {
		t.Fatalf("P0001 marked permanent: %v", err)
	}
	if !strings.Contains(err.Error(), "consumer tickets, event type issues.closed, statement 1") {
		t.Fatalf("error does not say where: %v", err)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'e2'"); n != 0 {
		t.Fatalf("inbox rows for e2 = %d, want 0", n)
	}
	// A failure in the middle of the list leaves nothing of its first part.
	if _, err := db.Pool.Exec(context.Background(), "ALTER TABLE crm.tickets ADD CONSTRAINT never_closed CHECK (state = 'open') NOT VALID"); err != nil {
		t.Fatal(err)
	}
	out, err = applyOne(t, db, h, closed(3, "e3", 7))
	if out != consumer.Failed || !consumer.IsPermanent(err) || !strings.Contains(err.Error(), `violates check constraint "never_closed"`) {
		t.Fatalf("apply = %v, %v; want a permanent check violation", out, err)
	}
	if n := db.Count(t, "SELECT count(*) FROM crm.runs"); n != 0 {
		t.Fatalf("runs = %d, want 0: the first statements rolled back", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'e3'"); n != 0 {
		t.Fatalf("inbox rows for e3 = %d, want 0", n)
	}
	if _, err := db.Pool.Exec(context.Background(), "ALTER TABLE crm.tickets DROP CONSTRAINT never_closed"); err != nil {
		t.Fatal(err)
	}
	if out, err := applyOne(t, db, h, closed(3, "e3", 7)); out != consumer.Processed || err != nil {
		t.Fatalf("redelivery: %v, %v", out, err)
	}
	if got := strings.Join(runs(t, db), ", "); got != "close:open e3, closed:closed e3" {
		t.Fatalf("runs = %s", got)
	}
}

// The batch path gives the outcomes and the rows the per-event path
// gives, bad events included, and sends the statements of a batch in one
// pipeline: one round trip for the handler, not one per statement.
func TestBatchEquivalentToPerEvent(t *testing.T) {
	t.Parallel()
	var evs []consumer.Event
	for i := range 40 {
		seq := uint64(len(evs) + 1)
		switch i % 4 {
		case 0, 1:
			evs = append(evs, opened(seq, fmt.Sprint("o", i), i, fmt.Sprint("t", i)))
		case 2:
			evs = append(evs, closed(seq, fmt.Sprint("c", i), i-2))
		case 3:
			evs = append(evs, event(seq, fmt.Sprint("x", i), "issues.labeled", `{}`))
		}
	}
	evs = append(evs, evs[5])                                                                           // a duplicate
	evs[10] = event(evs[10].StreamSeq, "bad-null", "issues.opened", `{"issue":{"id":1000}}`)            // no title: 23502
	evs[20] = event(evs[20].StreamSeq, "bad-cast", "issues.opened", `{"issue":{"id":"x","title":"y"}}`) // 22P02

	summary := func(db *hookbridgetest.Database, outs []consumer.Result) string {
		var b strings.Builder
		for i, r := range outs {
			fmt.Fprintf(&b, "%s:%s:%v ", evs[i].ID, r.Outcome, consumer.IsPermanent(r.Err))
		}
		rows, err := db.Pool.Query(context.Background(), "SELECT issue_id || title || state || opened_event FROM crm.tickets ORDER BY issue_id")
		if err != nil {
			t.Fatal(err)
		}
		tickets, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return b.String() + "\n" + strings.Join(tickets, ",") + "\n" + strings.Join(runs(t, db), ",") +
			fmt.Sprintf("\noutbox %d inbox %d", db.Count(t, "SELECT count(*) FROM hookbridge.outbox"), db.Count(t, "SELECT count(*) FROM hookbridge.inbox"))
	}

	one := hookbridgetest.Postgres(t, crm())
	h := newHandler(t)
	var perEvent []consumer.Result
	for _, ev := range evs {
		out, err := applyOne(t, one, h, ev)
		perEvent = append(perEvent, consumer.Result{Outcome: out, Err: err})
	}

	many := hookbridgetest.Postgres(t, crm())
	tr := &batchCounter{}
	pool := tracedPool(t, many.URL, tr)
	batched := engine.ApplyBatch(context.Background(), pool, "tickets", h, evs)

	want, got := summary(one, perEvent), summary(many, batched)
	if got != want {
		t.Fatalf("batch differs from per event:\n batch: %s\n event: %s", got, want)
	}
	if !strings.Contains(want, "bad-null:failed:true") || !strings.Contains(want, "bad-cast:failed:true") || !strings.Contains(want, "o5:duplicate") {
		t.Fatalf("the bad events did not fail permanently, or no duplicate: %s", want)
	}
	// The first set-wise attempt sends the statements of all 40 new
	// events at once (21 opened, 9 closed of 5 statements, 10 others: 76);
	// no statement of the handler ever travels alone.
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.maxQueued != 76 || tr.singles > 0 {
		t.Fatalf("largest handler pipeline %d statements, %d statements sent alone; want 76 and 0", tr.maxQueued, tr.singles)
	}
}

// batchCounter counts the handler's statements (those on crm.*) per
// round trip.
type batchCounter struct {
	mu        sync.Mutex
	maxQueued int
	singles   int
}

func (b *batchCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if strings.Contains(d.SQL, "crm.") {
		b.singles++
	}
	return ctx
}
func (b *batchCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (b *batchCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, q := range d.Batch.QueuedQueries {
		if strings.Contains(q.SQL, "crm.") {
			n++
		}
	}
	b.maxQueued = max(b.maxQueued, n)
	return ctx
}
func (b *batchCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (b *batchCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func tracedPool(t *testing.T, url string, tr pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns = 1 // one apply at a time: the counter's batches do not interleave
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A constraint error is dead-lettered at the first delivery, with
// Postgres's message, and the message is terminated.
func TestConstraintErrorDeadLetteredAtFirstDelivery(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{1, 0} {
		t.Run(fmt.Sprintf("batch=%d", bs), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, crm())
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "tickets", EventTypes: []string{"issues.opened", "issues.closed"},
				Handler: newHandler(t), BatchSize: bs, MaxDeliver: 5, Backoff: []time.Duration{20 * time.Millisecond},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("consumer: %v", err)
				}
			}()
			ns.PublishHook(t, "gh", "good-1", "issues.opened", []byte(`{"issue":{"id":1,"title":"a"}}`))
			seq := ns.PublishHook(t, "gh", "bad-1", "issues.opened", []byte(`{"issue":{"id":2}}`))
			ns.PublishHook(t, "gh", "good-2", "issues.opened", []byte(`{"issue":{"id":3,"title":"c"}}`))
			hookbridgetest.Eventually(t, time.Minute, "dead letter and two tickets", func() bool {
				return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters") == 1 && db.Count(t, "SELECT count(*) FROM crm.tickets") == 2
			})
			// Every message acked or terminated: a wrong redelivery would
			// have come before.
			hookbridgetest.Eventually(t, time.Minute, "the durable settled", func() bool {
				c, err := ns.JS.Consumer(context.Background(), stream.Hooks, "tickets")
				if err != nil {
					return false
				}
				info, err := c.Info(context.Background())
				return err == nil && info.NumPending == 0 && info.NumAckPending == 0
			})
			dls, err := engine.ListDeadLetters(context.Background(), db.Pool, engine.DeadLetterFilter{Consumer: "tickets"})
			if err != nil || len(dls) != 1 {
				t.Fatalf("dead letters %v, %v", dls, err)
			}
			d := dls[0]
			if d.Deliveries != 1 || d.Reason != engine.ReasonPermanent || d.EventID != "bad-1" || d.StreamSeq != seq {
				t.Fatalf("dead letter %+v", d)
			}
			if !strings.Contains(d.LastError, `null value in column "title"`) || !strings.Contains(d.LastError, "SQLSTATE 23502") {
				t.Fatalf("last error %q lacks Postgres's message", d.LastError)
			}
			if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'bad-1'"); n != 0 {
				t.Fatalf("inbox holds the dead-lettered event")
			}
		})
	}
}

// Check prepares every statement and reports each bad one with the
// consumer, the event type and Postgres's message, executing nothing.
func TestCheckReportsEveryBadStatement(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, crm())
	check := func(h *sqlconsumer.Handler) error {
		tx, err := db.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // read-only check
		return h.Check(context.Background(), tx)
	}
	if err := check(newHandler(t)); err != nil {
		t.Fatalf("good statements: %v", err)
	}
	h, err := sqlconsumer.New("tickets", map[string][]string{
		"issues.opened": {`INSERT INTO crm.tickets (issue_id) VALUES (@event_id::bigint)`, `INSERT INTO crm.nope VALUES (@body)`},
		"issues.closed": {`UPDTE crm.tickets SET state = 'closed'`},
		"*":             {`SELECT crm.fail(@stream_seq::bigint)`, `SELECT 1; SELECT 2`, `SELECT @body::jsonb, $2::int`},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = check(h)
	for _, want := range []string{
		`consumer tickets, event type issues.opened, statement 2: ERROR: relation "crm.nope" does not exist (SQLSTATE 42P01)`,
		`consumer tickets, event type issues.closed, statement 1: ERROR: syntax error at or near "UPDTE" (SQLSTATE 42601)`,
		`consumer tickets, event type *, statement 1: ERROR: function crm.fail(bigint) does not exist (SQLSTATE 42883)`,
		`consumer tickets, event type *, statement 2: ERROR: cannot insert multiple commands into a prepared statement (SQLSTATE 42601)`,
		`consumer tickets, event type *, statement 3: the statement has 2 parameters, 1 of them named`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(fmt.Sprint(err), "statement 1: ERROR: null") || strings.Count(fmt.Sprint(err), "\n") != 4 {
		t.Errorf("want exactly five errors, got:\n%v", err)
	}
	if n := db.Count(t, "SELECT count(*) FROM crm.tickets"); n != 0 {
		t.Fatalf("check wrote %d rows", n)
	}
}

// syncBuffer is a log sink the consumer's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Postgres quotes the offending value in a data error's message
// (invalid input syntax for type bigint: "…"). The dead letter keeps that
// message whole; the log lines carry the SQLSTATE and the message with
// the value masked, never a fragment of the body.
func TestDataErrorLogsNoBodyValue(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{1, 0} {
		t.Run(fmt.Sprintf("batch=%d", bs), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, crm())
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			var logs syncBuffer
			c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "tickets", EventTypes: []string{"issues.opened", "issues.closed"},
				Handler: newHandler(t), BatchSize: bs, MaxDeliver: 5, Backoff: []time.Duration{20 * time.Millisecond},
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("consumer: %v", err)
				}
			}()
			const secret = "card-4111-1111"
			ns.PublishHook(t, "gh", "good-1", "issues.opened", []byte(`{"issue":{"id":1,"title":"a"}}`))
			ns.PublishHook(t, "gh", "bad-1", "issues.opened", []byte(`{"issue":{"id":"`+secret+`","title":"b"}}`))
			hookbridgetest.Eventually(t, time.Minute, "dead letter and one ticket", func() bool {
				return db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters") == 1 && db.Count(t, "SELECT count(*) FROM crm.tickets") == 1
			})
			dls, err := engine.ListDeadLetters(context.Background(), db.Pool, engine.DeadLetterFilter{Consumer: "tickets"})
			if err != nil || len(dls) != 1 {
				t.Fatalf("dead letters %v, %v", dls, err)
			}
			if d := dls[0]; !strings.Contains(d.LastError, `invalid input syntax for type bigint: "`+secret+`"`) {
				t.Fatalf("dead letter's error %q lacks Postgres's full message", d.LastError)
			}
			out := logs.String()
			if strings.Contains(out, secret) {
				t.Fatalf("a log line holds a body value:\n%s", out)
			}
			if !strings.Contains(out, "SQLSTATE 22P02") || !strings.Contains(out, "invalid input syntax for type bigint") {
				t.Fatalf("the log lacks the SQLSTATE and message:\n%s", out)
			}
		})
	}
}

// A statement Postgres cannot prepare (here: a table dropped after the
// check at start) fails the whole pipeline before anything runs, and pgx
// reports it on every result. The error must still name the statement and
// the event type it belongs to, not the first statement of the batch.
func TestUnpreparableStatementIsNamed(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, crm())
	h, err := sqlconsumer.New("tickets", map[string][]string{
		"issues.opened": apply["issues.opened"],
		"issues.moved": {
			`INSERT INTO crm.runs (what, event_id, event_type, source, consumer, stream_seq, received)
			 VALUES ('moved', @event_id, @event_type, @source, @consumer, @stream_seq, @received_at)`,
			`UPDATE crm.gone SET state = 'moved' WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint`,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	moved := event(2, "e2", "issues.moved", `{"issue":{"id":7}}`)
	for _, evs := range [][]consumer.Event{{moved}, {opened(1, "e1", 7, "a"), moved}} {
		tx, err := db.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		err = h.HandleBatch(context.Background(), tx, evs)
		_ = tx.Rollback(context.Background())
		if err == nil || !strings.Contains(err.Error(), `relation "crm.gone" does not exist`) {
			t.Fatalf("%d events: err = %v, want the missing table", len(evs), err)
		}
		if !strings.Contains(err.Error(), "event type issues.moved, statement 2:") {
			t.Fatalf("%d events: err = %v, want it to name issues.moved's statement 2", len(evs), err)
		}
	}
}

// A statement can postpone its event with hookbridge.postpone(reason)
// (SQLSTATE HB001): the apply fails, rolls back, is neither permanent nor
// counted as a plain failure, and applies once the later event it waits
// for has.
func TestStatementPostponesItsEvent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, crm())
	h, err := sqlconsumer.New("tickets", map[string][]string{
		"issues.opened": apply["issues.opened"],
		"issues.closed": {
			`SELECT hookbridge.postpone('ticket not opened yet')
			 WHERE NOT EXISTS (SELECT 1 FROM crm.tickets WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint)`,
			`UPDATE crm.tickets SET state = 'closed' WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint`,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := applyOne(t, db, h, closed(1, "c1", 9))
	if out != consumer.Failed || !consumer.IsPostponed(err) || consumer.IsPermanent(err) || !strings.Contains(err.Error(), "ticket not opened yet") {
		t.Fatalf("closed before opened: %v, %v; want failed, postponed, with the reason", out, err)
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 0 {
		t.Fatalf("inbox rows = %d, want 0 (rolled back)", n)
	}
	if out, err := applyOne(t, db, h, opened(2, "o1", 9, "t")); out != consumer.Processed || err != nil {
		t.Fatalf("opened: %v, %v", out, err)
	}
	if out, err := applyOne(t, db, h, closed(1, "c1", 9)); out != consumer.Processed || err != nil {
		t.Fatalf("closed after opened: %v, %v", out, err)
	}
	if n := db.Count(t, "SELECT count(*) FROM crm.tickets WHERE state = 'closed'"); n != 1 {
		t.Fatalf("closed tickets = %d, want 1", n)
	}
}

// Removing a type's apply statement narrows the consumer's event types.
// The events of that type stored before the change are not lost: each
// becomes a dead letter whose reason says the type was dropped and whose
// error names the missing statement, and putting the statement back and
// replaying the dead letters applies them.
func TestRemovedStatementDeadLettersItsStoredEvents(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, crm())
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			wide := map[string][]string{
				"issues.opened": apply["issues.opened"],
				"issues.closed": {`UPDATE crm.tickets SET state = 'closed' WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint`},
			}
			narrow := map[string][]string{"issues.opened": apply["issues.opened"]}
			partitions := 0
			if keyed {
				partitions = stream.DefaultPartitions
			}
			run := func(statements map[string][]string) (stop func()) {
				h, err := sqlconsumer.New("tickets", statements)
				if err != nil {
					t.Fatal(err)
				}
				c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "tickets", EventTypes: h.Types(), Handler: h,
					Partitions: partitions, MaxDeliver: 5, Backoff: []time.Duration{20 * time.Millisecond},
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				var once sync.Once
				stop = func() { once.Do(func() { cancel(); <-done }) }
				t.Cleanup(stop)
				return stop
			}
			// Every durable the consumer reads must exist before the events
			// arrive: the partitions create theirs concurrently, so the
			// last one existing says nothing of the others, and one created
			// by the narrow run never sees the closed events.
			durables := []string{"tickets"}
			if keyed {
				durables = durables[:0]
				for p := range stream.DefaultPartitions {
					durables = append(durables, stream.PartitionDurable("tickets", p))
				}
			}
			stop := run(wide)
			hookbridgetest.Eventually(t, time.Minute, "the consumer's durables created", func() bool {
				for _, d := range durables {
					if _, err := ns.JS.Consumer(context.Background(), stream.Hooks, d); err != nil {
						return false
					}
				}
				return true
			})
			stop()
			const n = 12
			for i := range n {
				opened := []byte(fmt.Sprintf(`{"issue":{"id":%d,"title":"t%d"}}`, i, i))
				closed := []byte(fmt.Sprintf(`{"issue":{"id":%d}}`, i))
				if keyed {
					key := fmt.Sprintf("issue-%d", i)
					ns.PublishKeyedHook(t, "gh", fmt.Sprintf("o%d", i), "issues.opened", key, opened)
					ns.PublishKeyedHook(t, "gh", fmt.Sprintf("c%d", i), "issues.closed", key, closed)
				} else {
					ns.PublishHook(t, "gh", fmt.Sprintf("o%d", i), "issues.opened", opened)
					ns.PublishHook(t, "gh", fmt.Sprintf("c%d", i), "issues.closed", closed)
				}
			}
			stop = run(narrow)
			hookbridgetest.Eventually(t, time.Minute, "the opened events applied and the closed ones dead-lettered", func() bool {
				return db.Count(t, `SELECT count(*) FROM crm.tickets`) == n && db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) >= n
			})
			if got := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE reason = $1 AND event_type = 'issues.closed'
				AND last_error LIKE '%no longer one of consumer tickets''s event types%'
				AND last_error LIKE '%no statement for event type "issues.closed" in sql.apply%'`, engine.ReasonTypeDropped); got != n {
				t.Fatalf("%d dead letters of the dropped type with its reason and the missing statement named, want %d", got, n)
			}
			if got := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); got != n {
				t.Fatalf("%d dead letters, want %d", got, n)
			}
			// Keyed, the error says that a dead letter a later event of its
			// key passed needs --out-of-order.
			wantHint := 0
			if keyed {
				wantHint = n
			}
			if got := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE last_error LIKE '%requeue this dead letter (with --out-of-order%'`); got != wantHint {
				t.Fatalf("%d dead letters name --out-of-order, want %d", got, wantHint)
			}
			stop()
			// The statement is back: the dead letters apply.
			h, err := sqlconsumer.New("tickets", wide)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := engine.Replay(context.Background(), db.Pool, ns.JS, engine.ReplayOptions{Consumer: "tickets", Handler: h,
				EventTypes: h.Types(), DeadLetters: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil || sum.Processed != n || sum.Resolved != n {
				t.Fatalf("replay of the dead letters: %+v, %v; want %d processed and resolved", sum, err, n)
			}
			if got := db.Count(t, `SELECT count(*) FROM crm.tickets WHERE state = 'closed'`); got != n {
				t.Fatalf("%d tickets closed, want %d", got, n)
			}
		})
	}
}

// An SQL consumer postpones an event through hookbridge.postpone
// (SQLSTATE HB001) on the keyed engine: two members, each issue's close
// sent before its open. Every ticket ends closed, once, with nothing
// dead-lettered though max_deliver is 1 (a postponement is not a
// failure), and the backoff is an hour: a close applies within the
// test's minute only because it is tried again right after its open.
func TestStatementPostponesOnTheKeyedEngine(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, crm())
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	statements := map[string][]string{
		"issues.opened": apply["issues.opened"],
		"issues.closed": {
			`SELECT hookbridge.postpone('ticket not opened yet')
			 WHERE NOT EXISTS (SELECT 1 FROM crm.tickets WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint)`,
			`UPDATE crm.tickets SET state = 'closed' WHERE issue_id = (@body::jsonb #>> '{issue,id}')::bigint`,
		},
	}
	postponed := &postponeCounter{}
	for range 2 {
		h, err := sqlconsumer.New("tickets", statements)
		if err != nil {
			t.Fatal(err)
		}
		c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "tickets", EventTypes: h.Types(), Handler: h,
			Partitions: stream.DefaultPartitions, MaxDeliver: 1, Backoff: []time.Duration{time.Hour}, Tracer: postponed,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	const n = 30
	for i := range n {
		key := fmt.Sprintf("issue-%d", i)
		ns.PublishKeyedHook(t, "gh", fmt.Sprintf("c%d", i), "issues.closed", key, []byte(fmt.Sprintf(`{"issue":{"id":%d}}`, i)))
		ns.PublishKeyedHook(t, "gh", fmt.Sprintf("o%d", i), "issues.opened", key, []byte(fmt.Sprintf(`{"issue":{"id":%d,"title":"t"}}`, i)))
	}
	hookbridgetest.Eventually(t, time.Minute, "every ticket closed", func() bool {
		return db.Count(t, `SELECT count(*) FROM crm.tickets WHERE state = 'closed'`) == n ||
			db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`) > 0
	})
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); got != 0 {
		t.Fatalf("%d dead letters, want none", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM crm.tickets WHERE state = 'closed'`); got != n {
		t.Fatalf("%d tickets closed, want %d", got, n)
	}
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.inbox`); got != 2*n {
		t.Fatalf("%d inbox rows, want %d", got, 2*n)
	}
	if got := postponed.n.Load(); got < n {
		t.Fatalf("%d postponements reported, want at least %d (each close before its open)", got, n)
	}
	hookbridgetest.Eventually(t, time.Minute, "no postponement left", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures`) == 0
	})
}

// postponeCounter counts the postponed outcomes the engine reports.
type postponeCounter struct{ n atomic.Int64 }

func (p *postponeCounter) TraceApplyStart(ctx context.Context, _ engine.TraceApplyStartData) context.Context {
	return ctx
}

func (p *postponeCounter) TraceApplyEnd(_ context.Context, d engine.TraceApplyEndData) {
	for _, o := range d.Outcomes {
		if o == consumer.Postponed {
			p.n.Add(1)
		}
	}
}

func (p *postponeCounter) TraceDeadLetterStart(ctx context.Context, _ engine.TraceDeadLetterStartData) context.Context {
	return ctx
}

func (p *postponeCounter) TraceDeadLetterEnd(context.Context, engine.TraceDeadLetterEndData) {}
