package relay_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// The consumer and source whose inbox rows the applied messages of these
// tests derive their ids from.
const packConsumer, packSource = "c", "s"

// applied is a message a handler of packConsumer writes for event: its id
// is the event's derived id.
func applied(event, key string) publisher.Message {
	return msg(publisher.DerivedID(packConsumer, packSource, event), key)
}

// claimEvents claims, in tx's inbox, the events msgs' ids derive from, as
// a consumer's apply does before it runs the handler.
func claimEvents(ctx context.Context, tx pgx.Tx, msgs []publisher.Message) error {
	for _, m := range msgs {
		ev := strings.TrimPrefix(m.ID, packConsumer+":"+packSource+":")
		e := store.InboxEntry{Source: packSource, EventID: ev, EventType: "t", BodySHA256: []byte{1}, StreamSeq: 1}
		if _, err := store.InboxClaim(ctx, tx, packConsumer, e); err != nil {
			return err
		}
	}
	return nil
}

// enqueueApplied commits msgs in one transaction that first claims their
// events: the transaction owns the ids, so they are written as one pack.
func enqueueApplied(t testing.TB, pool *pgxpool.Pool, msgs ...publisher.Message) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := claimEvents(ctx, tx, msgs); err != nil {
			return err
		}
		return publisher.EnqueueBatch(ctx, tx, msgs)
	})
	if err != nil {
		t.Fatalf("enqueue applied: %v", err)
	}
}

// tables counts the rows of outbox_rows and the packs of outbox_packs.
func tables(t testing.TB, db *hookbridgetest.Database) (rows, packs int) {
	t.Helper()
	return db.Count(t, `SELECT count(*) FROM hookbridge.outbox_rows`), db.Count(t, `SELECT count(*) FROM hookbridge.outbox_packs`)
}

// The messages a transaction writes for the events it claimed go into one
// pack, which the outbox view shows as one row per message, in order,
// with ids and key_seqs of their own; the relay publishes each with its
// id and headers, marks the pack sent with every sequence, and a sent
// pack is not chosen again.
func TestAppliedMessagesArePackedAndPublished(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	a, b, c := applied("e1", "K"), applied("e2", ""), applied("e3", "K")
	b.Header = map[string]string{"X-Trace": "abc"}
	enqueueApplied(t, db.Pool, a, b, c)
	if r, p := tables(t, db); r != 0 || p != 1 {
		t.Fatalf("outbox_rows %d, outbox_packs %d; want 0 and 1", r, p)
	}
	got := db.Outbox(t, "")
	if len(got) != 3 || got[0].ID != a.ID || got[1].ID != b.ID || got[2].ID != c.ID || got[1].Headers != `{"X-Trace": "abc"}` ||
		got[0].OrderingKey != "K" || got[1].OrderingKey != "" || got[0].Status != "pending" {
		t.Fatalf("outbox view = %+v", got)
	}
	if n := db.Count(t, `SELECT count(DISTINCT id) FROM hookbridge.outbox WHERE key_seq IS NOT NULL OR ordering_key IS NULL`); n != 3 {
		t.Fatalf("messages with an id of their own and a key_seq when keyed: %d, want 3", n)
	}

	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	if n, err := r.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3, nil", n, err)
	}
	msgs := eventsMsgs(t, ns.JS)
	if len(msgs) != 3 {
		t.Fatalf("stream holds %d msgs, want 3", len(msgs))
	}
	byID := map[string]streamMsg{}
	for _, m := range msgs {
		byID[m.id] = m
	}
	if m := byID[b.ID]; m.header.Get("X-Trace") != "abc" || m.data != string(b.Payload) || m.subject != b.Subject {
		t.Fatalf("stored %s = %+v", b.ID, m)
	}
	if byID[a.ID].seq > byID[c.ID].seq {
		t.Fatalf("key K: %s stored after %s", a.ID, c.ID)
	}
	for _, m := range []publisher.Message{a, b, c} {
		s := row(t, db, m.ID)
		if s.status != "sent" || s.streamSeq == nil || uint64(*s.streamSeq) != byID[m.ID].seq {
			t.Fatalf("%s = %+v, want sent at %d", m.ID, s, byID[m.ID].seq)
		}
	}
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v; want nothing chosen again", n, err)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 3 {
		t.Fatalf("stream holds %d msgs after the second round", got)
	}
	st, err := relay.OutboxStats(ctx, db.Pool)
	if err != nil || st.Pending != 0 || st.Sent != 3 || st.Dead != 0 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
}

// A pack commits with the business change of its transaction, or not at
// all.
func TestPackCommitsAndRollsBackWithTheApply(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE effects (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	apply := func(fail bool) error {
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			m := applied("e1", "K")
			if err := claimEvents(ctx, tx, []publisher.Message{m}); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ('e1')`); err != nil {
				return err
			}
			if err := publisher.Enqueue(ctx, tx, m); err != nil {
				return err
			}
			if fail {
				return errors.New("injected failure before commit")
			}
			return nil
		})
	}
	if err := apply(true); err == nil {
		t.Fatal("failed apply returned nil")
	}
	if r, p := tables(t, db); r != 0 || p != 0 || db.Count(t, `SELECT count(*) FROM effects`) != 0 {
		t.Fatalf("after rollback: rows %d, packs %d, effects %d", r, p, db.Count(t, `SELECT count(*) FROM effects`))
	}
	if err := apply(false); err != nil {
		t.Fatal(err)
	}
	if r, p := tables(t, db); r != 0 || p != 1 || db.Count(t, `SELECT count(*) FROM effects`) != 1 {
		t.Fatalf("after commit: rows %d, packs %d, effects %d", r, p, db.Count(t, `SELECT count(*) FROM effects`))
	}
}

// A failure before the send leaves the message pending: the pack's
// messages become rows, the failed one with its attempt counted, the one
// after it on the same key deferred behind it, and the others published.
// Once the cause is gone they go out in key order.
func TestPackFailureBeforePublishLeavesItPending(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	a, b, c := applied("e1", "K"), applied("e2", ""), applied("e3", "K")
	enqueueApplied(t, db.Pool, a, b, c)
	opts := fastOpts()
	// A backoff far longer than any pause of a loaded machine, so that
	// "backing off" is still true when it is read; the wait is then cut
	// short below, as its end would.
	opts.BackoffBase, opts.BackoffMax = time.Hour, time.Hour
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	relay.SetBeforePublish(r, func(id string) error {
		if id == a.ID {
			return errors.New("injected: broker refused")
		}
		return nil
	})
	if n, err := r.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1 (the unkeyed message), nil", n, err)
	}
	if rows, packs := tables(t, db); rows != 3 || packs != 0 {
		t.Fatalf("rows %d, packs %d; want the pack moved to 3 rows", rows, packs)
	}
	sa, sb, sc := row(t, db, a.ID), row(t, db, b.ID), row(t, db, c.ID)
	if sa.status != "pending" || sa.attempts != 1 || sa.lastError == nil || !strings.Contains(*sa.lastError, "injected") || sa.dueIn <= 0 {
		t.Fatalf("failed message = %+v, want pending, one attempt, backing off", sa)
	}
	if sb.status != "sent" || sb.streamSeq == nil {
		t.Fatalf("unkeyed message = %+v, want sent", sb)
	}
	if sc.status != "pending" || sc.attempts != 0 || sc.dueIn < sa.dueIn-50*time.Millisecond {
		t.Fatalf("message behind the failed one = %+v, want pending, no attempt, due with it (%s)", sc, sa.dueIn)
	}
	if got := eventsMsgs(t, ns.JS); len(got) != 1 || got[0].id != b.ID {
		t.Fatalf("stream = %+v, want only %s", got, b.ID)
	}

	relay.SetBeforePublish(r, nil)
	if _, err := db.Pool.Exec(ctx, `UPDATE hookbridge.outbox_rows SET next_attempt_at = clock_timestamp() WHERE status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	hookbridgetest.Eventually(t, time.Minute, "all sent", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == 3
	})
	got := eventsMsgs(t, ns.JS)
	ids := make([]string, len(got))
	for i, m := range got {
		ids[i] = m.id
	}
	if !slices.Equal(ids, []string{b.ID, a.ID, c.ID}) {
		t.Fatalf("stream order %v, want %s then key K in order", ids, b.ID)
	}
}

// A crash after the send, before the pack is marked, re-sends the same
// ids: JetStream answers duplicates and the stream holds each once.
func TestPackCrashAfterPublishResendsTheSameIDs(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	enqueueApplied(t, db.Pool, applied("e1", "K"), applied("e2", "K"), applied("e3", ""))
	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	crash := errors.New("injected crash")
	relay.SetAfterPublish(r, func([]string) error { return crash })
	var acks []*jetstream.PubAck
	relay.SetAcked(r, func(_ string, a *jetstream.PubAck) { acks = append(acks, a) })
	if _, err := r.RunOnce(ctx); !errors.Is(err, crash) {
		t.Fatalf("RunOnce err = %v, want the crash", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending'`); n != 3 {
		t.Fatalf("pending after the crash: %d, want 3", n)
	}
	if _, packs := tables(t, db); packs != 1 {
		t.Fatalf("packs after the crash: %d, want the pack untouched", packs)
	}
	relay.SetAfterPublish(r, nil)
	if n, err := r.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("retry RunOnce = %d, %v", n, err)
	}
	dups := 0
	for _, a := range acks[3:] {
		if a.Duplicate {
			dups++
		}
	}
	if len(acks) != 6 || dups != 3 {
		t.Fatalf("%d acks, %d duplicates on the retry; want 6 and 3", len(acks), dups)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 3 {
		t.Fatalf("stream holds %d msgs, want 3", got)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`); n != 3 {
		t.Fatalf("sent after the retry: %d, want 3", n)
	}
}

// Enqueueing an id already packed is a no-op with the same content and
// ErrIDReused with other content: in the same transaction, from another
// transaction that does not own it, and from SQL.
func TestPackedIDRepeats(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()

	m := applied("e1", "K")
	other := m
	other.Payload = []byte("other")
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := claimEvents(ctx, tx, []publisher.Message{m}); err != nil {
			return err
		}
		if err := publisher.Enqueue(ctx, tx, m); err != nil {
			return err
		}
		if err := publisher.Enqueue(ctx, tx, m); err != nil {
			return err // the same content again: a no-op
		}
		return publisher.Enqueue(ctx, tx, other)
	})
	if !errors.Is(err, publisher.ErrIDReused) {
		t.Fatalf("same transaction, other content: %v, want ErrIDReused", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 0 {
		t.Fatalf("outbox holds %d messages after the rollback", n)
	}
	enqueueApplied(t, db.Pool, m)
	enqueue(t, db.Pool, m) // another transaction, same content: a no-op
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return publisher.Enqueue(ctx, tx, other) })
	if !errors.Is(err, publisher.ErrIDReused) {
		t.Fatalf("another transaction, other content: %v, want ErrIDReused", err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT hookbridge.enqueue($1, 'events.test.created', '"x"')`, m.ID); err == nil ||
		!strings.Contains(err.Error(), "reused with different content") {
		t.Fatalf("SQL enqueue, other content: %v", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != 1 {
		t.Fatalf("outbox holds %d messages, want 1", n)
	}
}

// With DeleteSent, published messages are deleted instead of kept, rows
// and packs alike; the stream is the record of what went out.
func TestDeleteSentKeepsNothing(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	enqueueApplied(t, db.Pool, applied("e1", "K"), applied("e2", ""))
	enqueue(t, db.Pool, msg("r1", "K"))
	opts := fastOpts()
	opts.DeleteSent = true
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	if n, err := r.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3", n, err)
	}
	if rows, packs := tables(t, db); rows != 0 || packs != 0 {
		t.Fatalf("rows %d, packs %d kept; want none", rows, packs)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 3 {
		t.Fatalf("stream holds %d msgs, want 3", got)
	}
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v", n, err)
	}
}

// Retention deletes sent packs older than it, and neither pending packs
// nor newer sent ones.
func TestRetentionDeletesOldSentPacks(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	enqueueApplied(t, db.Pool, applied("old-1", ""), applied("old-2", ""))
	enqueueApplied(t, db.Pool, applied("new-1", ""))
	opts := fastOpts()
	opts.Retention = time.Hour
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	if n, err := r.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	enqueueApplied(t, db.Pool, applied("pending-1", ""))
	if _, err := db.Pool.Exec(ctx, `UPDATE hookbridge.outbox_packs SET created_at = now() - interval '3 hours', sent_at = now() - interval '2 hours'
		WHERE 'c:s:old-1' = ANY (event_ids)`); err != nil {
		t.Fatal(err)
	}
	n, err := r.PurgeSent(ctx)
	if err != nil || n != 2 {
		t.Fatalf("PurgeSent = %d, %v; want the 2 messages of the old pack", n, err)
	}
	got := db.Outbox(t, "")
	if len(got) != 2 || !strings.HasSuffix(got[0].ID, "new-1") || got[0].Status != "sent" || !strings.HasSuffix(got[1].ID, "pending-1") || got[1].Status != "pending" {
		t.Fatalf("outbox after retention = %+v", got)
	}
}

// A pack whose key waits behind a pack another relay holds is left whole:
// none of its messages goes out, not even those of other keys, until the
// one ahead is done; then all go, in key order.
func TestPackWaitsWholeBehindAPackHeldElsewhere(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	first := applied("e1", "K")
	enqueueApplied(t, db.Pool, first)
	enqueueApplied(t, db.Pool, applied("e2", "K"), applied("e3", "other"))
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
	if _, err := tx.Exec(ctx, `SELECT 1 FROM hookbridge.outbox_packs WHERE $1 = ANY (event_ids) FOR UPDATE`, first.ID); err != nil {
		t.Fatal(err)
	}
	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce behind the held pack = %d, %v; want 0", n, err)
	}
	if rows, packs := tables(t, db); rows != 0 || packs != 2 {
		t.Fatalf("rows %d, packs %d; want both packs as they were", rows, packs)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3", n, err)
	}
	got := eventsMsgs(t, ns.JS)
	if len(got) != 3 || got[0].id != first.ID {
		t.Fatalf("stream = %+v, want %s first", got, first.ID)
	}
}

// In a Deferred context Enqueue gathers: messages are checked when they
// are enqueued and written by flush, all in one pack, in the order they
// were enqueued; an id already in the outbox is answered by flush.
func TestDeferredGathersIntoOnePack(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	a, b, c := applied("e1", "K"), applied("e2", ""), applied("e3", "K")
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := claimEvents(ctx, tx, []publisher.Message{a, b, c}); err != nil {
			return err
		}
		gctx, flush := publisher.Deferred(ctx)
		if err := publisher.Enqueue(gctx, tx, a); err != nil {
			return err
		}
		if err := publisher.EnqueueBatch(gctx, tx, []publisher.Message{b, c, a}); err != nil {
			return err
		}
		bad := c
		bad.Subject = "nope"
		if err := publisher.Enqueue(gctx, tx, bad); err == nil {
			t.Error("an invalid message was gathered")
		}
		other := b
		other.Payload = []byte("other")
		if err := publisher.Enqueue(gctx, tx, other); !errors.Is(err, publisher.ErrIDReused) {
			t.Errorf("gathered id with other content: %v, want ErrIDReused", err)
		}
		if _, packs := tables(t, db); packs != 0 {
			t.Error("written before the flush")
		}
		innerCtx, innerFlush := publisher.Deferred(gctx)
		if innerCtx != gctx || innerFlush(ctx, tx) != nil {
			t.Error("a nested Deferred does not share the outer one's messages")
		}
		return flush(gctx, tx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, p := tables(t, db); r != 0 || p != 1 {
		t.Fatalf("rows %d, packs %d; want one pack", r, p)
	}
	got := db.Outbox(t, "")
	if len(got) != 3 || got[0].ID != a.ID || got[1].ID != b.ID || got[2].ID != c.ID {
		t.Fatalf("outbox = %+v, want a, b, c in order", got)
	}
	// A repeat of a message already in the outbox is answered by flush.
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		gctx, flush := publisher.Deferred(ctx)
		other := a
		other.Payload = []byte("other")
		if err := publisher.Enqueue(gctx, tx, other); err != nil {
			return err
		}
		return flush(gctx, tx)
	})
	if !errors.Is(err, publisher.ErrIDReused) {
		t.Fatalf("flush of a reused id: %v, want ErrIDReused", err)
	}
}

// The operators' list of pending messages pages through rows and packed
// messages alike, newest first, each message once.
func TestPendingPagesIncludePackedMessages(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	enqueueApplied(t, db.Pool, applied("a1", ""), applied("a2", ""))
	enqueue(t, db.Pool, msg("row-1", ""))
	enqueueApplied(t, db.Pool, applied("b1", ""), applied("b2", ""), applied("b3", ""))
	var seen []int64
	before := int64(0)
	for range 10 {
		page, err := store.OutboxPage(ctx, db.Pool, "pending", before, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, o := range page {
			seen = append(seen, o.ID)
		}
		before = page[len(page)-1].ID
	}
	var want []int64
	rows, err := db.Pool.Query(ctx, `SELECT id FROM hookbridge.outbox ORDER BY id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	want, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 6 || !slices.Equal(seen, want) {
		t.Fatalf("pages gave %v, want %v", seen, want)
	}
}
