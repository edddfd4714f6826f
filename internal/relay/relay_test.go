package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

func TestRunOncePublishesWithMsgIDAndHeaders(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	m := msg("ev-1", "")
	m.Header = map[string]string{"Content-Type": "text/plain", "X-Trace": "abc"}
	enqueue(t, db.Pool, m)
	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	n, err := r.RunOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1, nil", n, err)
	}
	got := eventsMsgs(t, ns.JS)
	if len(got) != 1 {
		t.Fatalf("stream holds %d msgs, want 1", len(got))
	}
	g := got[0]
	if g.id != "ev-1" || g.subject != "events.test.created" || g.data != "payload of ev-1" ||
		g.header.Get("Content-Type") != "text/plain" || g.header.Get("X-Trace") != "abc" {
		t.Fatalf("stored message = %+v", g)
	}
	s := row(t, db, "ev-1")
	if s.status != "sent" || s.streamSeq == nil || uint64(*s.streamSeq) != g.seq || s.attempts != 0 {
		t.Fatalf("row = %+v, want sent with stream_seq %d", s, g.seq)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE sent_at IS NOT NULL`); n != 1 {
		t.Fatalf("sent_at not set")
	}
	// Nothing left: a second round publishes nothing.
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v", n, err)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 1 {
		t.Fatalf("stream holds %d msgs after second round", got)
	}
}

// A row without headers stores NULL, rows written before that stored an
// empty object; both publish with no headers but the relay's own.
func TestRowsWithoutHeadersPublish(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	enqueue(t, db.Pool, msg("no-headers", ""))
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE event_id = 'no-headers' AND headers IS NULL`); n != 1 {
		t.Fatal("a message without headers did not store NULL")
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO hookbridge.outbox (event_id, subject, payload, headers) VALUES ('empty-object', 'events.test.created', 'x', '{}')`); err != nil {
		t.Fatal(err)
	}
	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	if n, err := r.RunOnce(ctx); err != nil || n != 2 {
		t.Fatalf("RunOnce = %d, %v; want 2, nil", n, err)
	}
	for _, g := range eventsMsgs(t, ns.JS) {
		for k := range g.header {
			if !strings.HasPrefix(k, "Nats-") {
				t.Errorf("%s published with header %s", g.id, k)
			}
		}
	}
}

// Retention stops at the first row created after the cutoff and deletes
// every expired sent row before it, whatever lies between (dead, pending,
// sent late); a second pass finds nothing more.
func TestRetentionWalksPastKeptRows(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO hookbridge.outbox (event_id, subject, payload, status, sent_at, created_at, last_error)
		SELECT 'w-' || i, 'events.x', 'x',
		       CASE WHEN i % 7 = 0 THEN 'dead' WHEN i % 11 = 0 THEN 'pending' ELSE 'sent' END,
		       CASE WHEN i % 7 = 0 OR i % 11 = 0 THEN NULL WHEN i % 13 = 0 THEN now() ELSE now() - interval '4 days' END,
		       now() - interval '5 days', CASE WHEN i % 7 = 0 THEN 'gave up' END
		FROM generate_series(1, 3000) i ORDER BY i;
		INSERT INTO hookbridge.outbox (event_id, subject, payload, status, sent_at, created_at)
		VALUES ('recent', 'events.x', 'x', 'sent', now(), now())`); err != nil {
		t.Fatal(err)
	}
	want := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent' AND sent_at < now() - interval '3 days'`)
	opts := fastOpts()
	opts.Retention = 72 * time.Hour
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	if n, err := r.PurgeSent(ctx); err != nil || n != int64(want) {
		t.Fatalf("PurgeSent = %d, %v; want %d", n, err, want)
	}
	if n, err := r.PurgeSent(ctx); err != nil || n != 0 {
		t.Fatalf("second PurgeSent = %d, %v; want 0", n, err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent' AND sent_at < now() - interval '3 days'`); n != 0 {
		t.Fatalf("%d expired sent rows left", n)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status <> 'sent' OR sent_at >= now() - interval '1 hour'`); n != 3000-want+1 {
		t.Fatalf("kept rows = %d, want %d", n, 3000-want+1)
	}
}

// Proof 3: a failure before publishing leaves the row pending with one
// attempt counted and nothing in the stream.
func TestFailureBeforePublish(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	enqueue(t, db.Pool, msg("ev-1", ""))
	opts := fastOpts()
	opts.BackoffBase, opts.BackoffMax = time.Minute, time.Minute
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	relay.SetBeforePublish(r, func(string) error { return errors.New("injected: broker refused") })

	n, err := r.RunOnce(ctx)
	if err != nil || n != 0 {
		t.Fatalf("RunOnce = %d, %v; want 0, nil", n, err)
	}
	s := row(t, db, "ev-1")
	if s.status != "pending" || s.attempts != 1 || s.lastError == nil || !strings.Contains(*s.lastError, "injected") || s.streamSeq != nil {
		t.Fatalf("row = %+v, want pending, attempts 1, last_error set", s)
	}
	// Backoff: 1m with jitter, so due in [30s, 60s].
	if s.dueIn < 25*time.Second || s.dueIn > 61*time.Second {
		t.Fatalf("next attempt in %s, want 30s..60s", s.dueIn)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 0 {
		t.Fatalf("stream holds %d msgs, want 0", got)
	}
	// Not due: another round does not touch it.
	relay.SetBeforePublish(r, nil)
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce before due = %d, %v", n, err)
	}
	if s := row(t, db, "ev-1"); s.attempts != 1 || s.status != "pending" {
		t.Fatalf("row touched before due: %+v", s)
	}
}

// Proof 4: the relay "crashes" after the PubAck but before marking the row
// sent. The retry publishes the same Nats-Msg-Id, JetStream drops it as a
// duplicate, and the row ends sent with the original sequence.
func TestCrashAfterPublishBeforeMarkingSent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	enqueue(t, db.Pool, msg("ev-1", ""))
	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	crash := errors.New("injected crash")
	relay.SetAfterPublish(r, func(ids []string) error {
		if !slices.Equal(ids, []string{"ev-1"}) {
			t.Errorf("acked before crash: %v", ids)
		}
		return crash
	})
	var acks []*jetstream.PubAck
	relay.SetAcked(r, func(_ string, a *jetstream.PubAck) { acks = append(acks, a) })

	if _, err := r.RunOnce(ctx); !errors.Is(err, crash) {
		t.Fatalf("RunOnce err = %v, want the crash", err)
	}
	if s := row(t, db, "ev-1"); s.status != "pending" || s.attempts != 0 || s.streamSeq != nil {
		t.Fatalf("after crash row = %+v, want untouched pending", s)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 1 {
		t.Fatalf("stream holds %d msgs after crash, want 1", got)
	}

	relay.SetAfterPublish(r, nil)
	n, err := r.RunOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("retry RunOnce = %d, %v", n, err)
	}
	if len(acks) != 2 || acks[0].Duplicate || !acks[1].Duplicate || acks[0].Sequence != acks[1].Sequence {
		t.Fatalf("acks = %+v %+v, want the retry to be a duplicate of the first", acks[0], acks[len(acks)-1])
	}
	got := eventsMsgs(t, ns.JS)
	if len(got) != 1 || got[0].id != "ev-1" {
		t.Fatalf("stream = %+v, want exactly ev-1 once", got)
	}
	if s := row(t, db, "ev-1"); s.status != "sent" || s.streamSeq == nil || uint64(*s.streamSeq) != got[0].seq {
		t.Fatalf("row = %+v, want sent at seq %d", s, got[0].seq)
	}
}

// Proof 5: several relays over one database publish every message
// exactly once, in key_seq order per ordering key: messages written one
// row each, in packs (by transactions that claimed their events), and
// both on the same keys.
func TestRelaysRace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		relays int
		write  string
	}{{2, "rows"}, {4, "rows"}, {2, "packs"}, {4, "mixed"}} {
		t.Run(fmt.Sprintf("relays=%d/%s", c.relays, c.write), func(t *testing.T) {
			t.Parallel()
			raceRelays(t, c.relays, 1000, c.write)
		})
	}
}

// raceWrite commits batch (messages i..) one row each, as one pack, or
// alternately by transaction (write "rows", "packs", "mixed").
func raceWrite(t *testing.T, pool *pgxpool.Pool, write string, i int, batch []publisher.Message) {
	if write == "rows" || (write == "mixed" && i%20 == 0) {
		enqueue(t, pool, batch...)
		return
	}
	for j := range batch {
		batch[j].ID = publisher.DerivedID(packConsumer, packSource, batch[j].ID)
	}
	enqueueApplied(t, pool, batch...)
}

func raceRelays(t *testing.T, relays, rows int, write string) {
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)

	var mu sync.Mutex
	acked := map[string]int{}
	perRelay := make([]int, relays)
	for i := range relays {
		opts := fastOpts()
		opts.BatchSize = 64
		// Generous, so a slow machine cannot turn a late PubAck into a
		// legitimate retry that the once-only check below would count.
		opts.PublishTimeout = 30 * time.Second
		r := relay.NewRelay(db.Pool, connect(t, ns.URL()), opts)
		relay.SetAcked(r, func(id string, _ *jetstream.PubAck) {
			mu.Lock()
			acked[id]++
			perRelay[i]++
			mu.Unlock()
		})
		runRelay(t, r)
	}

	// Writers commit while the relays run: 10 writers, 10 rows per
	// transaction, half of the rows on 20 ordering keys.
	const writers, perTx = 10, 10
	all := ids("race", rows)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * perTx; i < rows; i += writers * perTx {
				var batch []publisher.Message
				for j := i; j < i+perTx && j < rows; j++ {
					key := ""
					if j%2 == 0 {
						key = fmt.Sprintf("key-%d", j%40)
					}
					batch = append(batch, msg(all[j], key))
				}
				raceWrite(t, db.Pool, write, i, batch)
			}
		}()
	}
	wg.Wait()
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); n != rows {
		t.Fatalf("outbox rows = %d, want %d", n, rows)
	}
	hookbridgetest.Eventually(t, time.Minute, "all rows sent", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == rows
	})

	if got := ns.StreamMsgs(t, stream.Events); got != uint64(rows) {
		t.Fatalf("stream holds %d msgs, want %d", got, rows)
	}
	// Sent messages are kept, so the tables say how they were written.
	if r, p := tables(t, db); (write == "rows") != (p == 0) || (write == "packs") != (r == 0) {
		t.Fatalf("written %s: %d rows and %d packs", write, r, p)
	}
	msgs := eventsMsgs(t, ns.JS)
	seen := map[string]uint64{}
	for _, m := range msgs {
		if _, dup := seen[m.id]; dup {
			t.Fatalf("event %s stored twice", m.id)
		}
		seen[m.id] = m.seq
	}
	mu.Lock()
	for _, id := range all {
		if _, ok := seen[id]; !ok {
			id = publisher.DerivedID(packConsumer, packSource, id)
		}
		if _, ok := seen[id]; !ok {
			t.Errorf("event %s missing from the stream", id)
		}
		if acked[id] != 1 {
			t.Errorf("event %s published %d times, want once", id, acked[id])
		}
	}
	t.Logf("rows published per relay: %v", perRelay)
	mu.Unlock()

	// stream_seq recorded for every row matches the stored message, and per
	// ordering key the stream order is key_seq order.
	rs, err := db.Pool.Query(context.Background(), `
		SELECT event_id, stream_seq, coalesce(ordering_key, '') FROM hookbridge.outbox ORDER BY ordering_key, key_seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	lastSeq := map[string]uint64{}
	for rs.Next() {
		var id, key string
		var seq int64
		if err := rs.Scan(&id, &seq, &key); err != nil {
			t.Fatal(err)
		}
		if uint64(seq) != seen[id] {
			t.Errorf("row %s: stream_seq %d, stream has it at %d", id, seq, seen[id])
		}
		if key != "" {
			if seen[id] < lastSeq[key] {
				t.Errorf("key %s: %s stored at %d, before an earlier row at %d", key, id, seen[id], lastSeq[key])
			}
			lastSeq[key] = seen[id]
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
}

// Proof 6: NATS goes away while rows are pending and being added, and comes
// back on the same store and port. The relay backs off, loses nothing,
// stores nothing twice, and drains.
func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	dir := t.TempDir()
	start := func(port int) *natsServer {
		ns, err := embedded.Start(embedded.Options{StoreDir: dir, Listen: true, Port: port})
		if err != nil {
			t.Fatalf("start nats: %v", err)
		}
		s := &natsServer{ns: ns}
		t.Cleanup(s.stop)
		return s
	}
	srv := start(-1)
	port := srv.ns.Addr().(*net.TCPAddr).Port
	js := connect(t, srv.ns.ClientURL())

	opts := fastOpts()
	opts.BatchSize = 16
	opts.PublishTimeout = time.Second
	r := relay.NewRelay(db.Pool, js, opts)
	const total = 300
	all := ids("outage", total)
	// The broker dies in the middle of a batch, just before the 101st row
	// is published: that row and the rest of its wave are in flight.
	down := make(chan struct{})
	var once sync.Once
	relay.SetBeforePublish(r, func(id string) error {
		if id == all[100] {
			once.Do(func() {
				srv.stop()
				close(down)
			})
		}
		return nil
	})
	runRelay(t, r)

	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 0; i < total; i += 6 { // 6 rows per transaction
			var batch []publisher.Message
			for j := i; j < i+6; j++ {
				key := ""
				if j%3 == 0 {
					key = fmt.Sprintf("k%d", j%5)
				}
				batch = append(batch, msg(all[j], key))
			}
			enqueue(t, db.Pool, batch...)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	select {
	case <-down:
	case <-time.After(time.Minute):
		t.Fatal("the broker was never stopped")
	}
	hookbridgetest.Eventually(t, time.Minute, "rows pending while NATS is down", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending'`) > 0
	})
	t.Logf("broker down; %d rows sent before", db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status='sent'`))
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending'`); n == 0 {
		t.Fatalf("no pending rows during the outage: the test would prove nothing")
	}
	start(port)
	<-written
	hookbridgetest.Eventually(t, time.Minute, "all rows sent after the broker returned", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == total
	})
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'dead'`); n != 0 {
		t.Fatalf("%d dead rows", n)
	}
	msgs := eventsMsgs(t, js)
	if len(msgs) != total {
		t.Fatalf("stream holds %d msgs, want %d", len(msgs), total)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.id] {
			t.Fatalf("%s stored twice", m.id)
		}
		seen[m.id] = true
	}
	// Whether the wave's publishes failed (attempts counted) or the relay
	// saw the connection gone before them depends on how fast the client
	// notices the shutdown: on a loaded machine often the latter. Either
	// way the rows were pending through the outage (checked above).
	t.Logf("rows retried: %d", db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE attempts > 0`))
}

type natsServer struct {
	once sync.Once
	ns   interface {
		Shutdown()
		WaitForShutdown()
		Addr() net.Addr
		ClientURL() string
	}
}

func (s *natsServer) stop() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// Proof 7: a row that can never be stored (no stream listens on its
// subject: "no responders") goes dead after MaxAttempts, keeps its error,
// is counted, and is neither retried nor deleted afterwards.
func TestAlwaysFailingRowGoesDead(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	// Enqueue only accepts events.* subjects; a row written by hand can
	// name a subject no stream captures.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO hookbridge.outbox (event_id, subject, payload) VALUES ('orphan-1', 'orphan.created', 'x')`); err != nil {
		t.Fatal(err)
	}
	enqueue(t, db.Pool, msg("fine-1", ""))
	opts := fastOpts()
	opts.MaxAttempts = 3
	opts.BackoffBase, opts.BackoffMax = time.Millisecond, 5*time.Millisecond
	opts.Retention = time.Nanosecond
	r := relay.NewRelay(db.Pool, ns.JS, opts)

	for i := 0; ; i++ {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if row(t, db, "orphan-1").status == "dead" {
			break
		}
		if i > 100 {
			t.Fatalf("row not dead after %d rounds: %+v", i, row(t, db, "orphan-1"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	s := row(t, db, "orphan-1")
	if s.attempts != 3 || s.lastError == nil || !strings.Contains(*s.lastError, "no response") {
		t.Fatalf("dead row = %+v (last_error %q), want 3 attempts and a no-responders error", s, deref(s.lastError))
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 1 {
		t.Fatalf("stream holds %d msgs, want only fine-1", got)
	}
	time.Sleep(10 * time.Millisecond)
	for range 3 {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := row(t, db, "orphan-1"); s.attempts != 3 || s.status != "dead" {
		t.Fatalf("dead row retried: %+v", s)
	}
	// Retention never deletes dead rows, even with a tiny retention.
	if _, err := r.PurgeSent(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := relay.OutboxStats(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 1 || st.Pending != 0 || st.Sent != 0 {
		t.Fatalf("stats = %+v, want 1 dead, the sent row purged", st)
	}
}

// A row the relay can never publish (malformed headers written by hand)
// goes dead at once instead of being retried MaxAttempts times.
func TestMalformedRowDeadAtOnce(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO hookbridge.outbox (event_id, subject, payload, headers)
		VALUES ('bad-1', 'events.x', 'x', '{"n": 1}'), ('bad-2', 'events.x', 'x', '{"Nats-Msg-Id": "y"}')`); err != nil {
		t.Fatal(err)
	}
	r := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bad-1", "bad-2"} {
		if s := row(t, db, id); s.status != "dead" || s.attempts != 1 || s.lastError == nil {
			t.Fatalf("%s = %+v, want dead after one attempt", id, s)
		}
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 0 {
		t.Fatalf("stream holds %d msgs", got)
	}
}

// Proof 8: a committed row is published at once thanks to LISTEN/NOTIFY,
// although the poll interval is an hour: each row is sent within the
// test's wait (a minute, for a loaded machine), which only a wake-up by
// its notification explains. The latency is logged (milliseconds on a
// quiet machine).
func TestNotifyLatency(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)

	opts := fastOpts()
	opts.PollInterval = time.Hour
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	listening := make(chan struct{}, 10)
	relay.SetListening(r, func() { listening <- struct{}{} })
	runRelay(t, r)
	select {
	case <-listening:
	case <-time.After(time.Minute):
		t.Fatal("relay never listened")
	}

	var worst time.Duration
	for i := range 5 {
		time.Sleep(100 * time.Millisecond) // let the relay go idle
		id := fmt.Sprintf("ev-%d", i)
		start := time.Now()
		enqueue(t, db.Pool, msg(id, ""))
		hookbridgetest.Eventually(t, time.Minute, id+" sent", func() bool {
			return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE event_id = $1 AND status = 'sent'`, id) == 1
		})
		worst = max(worst, time.Since(start))
	}
	t.Logf("worst commit-to-sent latency: %s (poll interval %s)", worst, opts.PollInterval)
	if got := ns.StreamMsgs(t, stream.Events); got != 5 {
		t.Fatalf("stream holds %d msgs, want 5", got)
	}
}

// Proof 9: retention deletes only sent rows older than Retention.
func TestRetention(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	// 2,500 old sent rows (more than two purge batches), 10 recent sent
	// rows, and old pending and dead rows.
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO hookbridge.outbox (event_id, subject, payload, status, sent_at, created_at)
		SELECT 'old-' || i, 'events.x', 'x', 'sent', now() - interval '4 days', now() - interval '4 days'
		FROM generate_series(1, 2500) i;
		INSERT INTO hookbridge.outbox (event_id, subject, payload, status, sent_at)
		SELECT 'new-' || i, 'events.x', 'x', 'sent', now() - interval '1 hour' FROM generate_series(1, 10) i;
		INSERT INTO hookbridge.outbox (event_id, subject, payload, status, created_at, next_attempt_at)
		VALUES ('old-pending', 'events.x', 'x', 'pending', now() - interval '5 days', now() + interval '1 hour');
		INSERT INTO hookbridge.outbox (event_id, subject, payload, status, created_at, last_error)
		VALUES ('old-dead', 'events.x', 'x', 'dead', now() - interval '5 days', 'gave up')`); err != nil {
		t.Fatal(err)
	}
	opts := fastOpts()
	opts.Retention = 72 * time.Hour
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	n, err := r.PurgeSent(ctx)
	if err != nil || n != 2500 {
		t.Fatalf("PurgeSent = %d, %v; want 2500", n, err)
	}
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE event_id LIKE 'old-%'`); got != 2 {
		t.Fatalf("old rows left = %d, want the pending and the dead one", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE event_id LIKE 'new-%'`); got != 10 {
		t.Fatalf("recent sent rows left = %d, want 10", got)
	}
	st, err := relay.OutboxStats(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 1 || st.Dead != 1 || st.Sent != 10 || st.OldestPending < 119*time.Hour {
		t.Fatalf("stats = %+v", st)
	}

	// Run purges on its own at start; a negative retention disables it.
	if _, err := db.Pool.Exec(ctx, `UPDATE hookbridge.outbox SET sent_at = now() - interval '4 days', created_at = now() - interval '4 days' WHERE event_id LIKE 'new-%'`); err != nil {
		t.Fatal(err)
	}
	off := opts
	off.Retention = -1
	if n, err := relay.NewRelay(db.Pool, ns.JS, off).PurgeSent(ctx); err != nil || n != 0 {
		t.Fatalf("disabled PurgeSent = %d, %v", n, err)
	}
	runRelay(t, r)
	hookbridgetest.Eventually(t, time.Minute, "Run to purge", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == 0
	})
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.outbox`); got != 2 {
		t.Fatalf("rows left = %d, want the pending and the dead one", got)
	}
}

// Rows of one ordering key are stored in commit order even when the first
// one fails: later rows of the key wait for it, other keys do not.
func TestOrderingKeyWaitsForFailedHead(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	enqueue(t, db.Pool, msg("a-1", "A"), msg("b-1", "B"))
	enqueue(t, db.Pool, msg("a-2", "A"), msg("free-1", ""))
	enqueue(t, db.Pool, msg("a-3", "A"), msg("b-2", "B"))

	opts := fastOpts()
	opts.BackoffBase, opts.BackoffMax = 300*time.Millisecond, 300*time.Millisecond
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	var failed atomic.Bool
	relay.SetBeforePublish(r, func(id string) error {
		if id == "a-1" && failed.CompareAndSwap(false, true) {
			return errors.New("injected")
		}
		return nil
	})
	n, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("first round published %d, want b-1, b-2, free-1", n)
	}
	if s := row(t, db, "a-1"); s.status != "pending" || s.attempts != 1 {
		t.Fatalf("a-1 = %+v, want pending after one failed attempt", s)
	}
	for _, id := range []string{"a-2", "a-3"} {
		if s := row(t, db, id); s.status != "pending" || s.attempts != 0 {
			t.Fatalf("%s = %+v, want pending and untried", id, s)
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox a, hookbridge.outbox b
		WHERE a.event_id = 'a-1' AND b.event_id IN ('a-2', 'a-3') AND b.next_attempt_at = a.next_attempt_at`); n != 2 {
		t.Fatalf("a-2 and a-3 not deferred to a-1's next attempt")
	}
	got := func() []string {
		var out []string
		for _, m := range eventsMsgs(t, ns.JS) {
			out = append(out, m.id)
		}
		return out
	}
	if g := got(); !slices.Equal(g, []string{"b-1", "free-1", "b-2"}) {
		t.Fatalf("stream after first round = %v", g)
	}
	hookbridgetest.Eventually(t, time.Minute, "key A drained", func() bool {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == 6
	})
	if g := got(); !slices.Equal(g, []string{"b-1", "free-1", "b-2", "a-1", "a-2", "a-3"}) {
		t.Fatalf("stream = %v, want key A in order after B", g)
	}
}

// A dead row does not block its key forever: later rows go on.
func TestDeadHeadUnblocksKey(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	enqueue(t, db.Pool, msg("a-1", "A"))
	enqueue(t, db.Pool, msg("a-2", "A"))
	opts := fastOpts()
	opts.MaxAttempts = 1
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	relay.SetBeforePublish(r, func(id string) error {
		if id == "a-1" {
			return errors.New("injected")
		}
		return nil
	})
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if s := row(t, db, "a-1"); s.status != "dead" {
		t.Fatalf("a-1 = %+v", s)
	}
	if n, err := r.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want a-2 published", n, err)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 1 {
		t.Fatalf("stream holds %d", got)
	}
}

// A relay whose NATS connection is down claims nothing, so an outage
// costs no attempts.
func TestNotConnectedClaimsNothing(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	enqueue(t, db.Pool, msg("ev-1", ""))

	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	r := relay.NewRelay(db.Pool, js, fastOpts())
	if _, err := r.RunOnce(ctx); !errors.Is(err, relay.ErrNotConnected) {
		t.Fatalf("RunOnce err = %v, want ErrNotConnected", err)
	}
	if s := row(t, db, "ev-1"); s.attempts != 0 || s.status != "pending" {
		t.Fatalf("row = %+v", s)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// A key's oldest pending row that the claim's LIMIT left out (here it sorts
// after a later row of its key) is locked and published first, instead of
// the later row being skipped round after round.
func TestKeyHeadBehindLimitIsClaimed(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	enqueue(t, db.Pool, msg("second", "K"))
	enqueue(t, db.Pool, msg("first", "K"))
	// Make "first" the head of K (lower key_seq) while "second" keeps the
	// lower id, both due at the same instant: the claim meets "second" first.
	if _, err := db.Pool.Exec(ctx, `
		UPDATE hookbridge.outbox SET key_seq = CASE event_id WHEN 'first' THEN 1 ELSE 2 END,
		       next_attempt_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	opts := fastOpts()
	opts.BatchSize = 1
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	for _, want := range []string{"first", "second"} {
		n, err := r.RunOnce(ctx)
		if err != nil || n != 1 {
			t.Fatalf("RunOnce = %d, %v; want %s published", n, err, want)
		}
	}
	var got []string
	for _, m := range eventsMsgs(t, ns.JS) {
		got = append(got, m.id)
	}
	if !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("stream = %v, want key_seq order", got)
	}
}

// A relay whose session dies mid-batch (after publishing, before marking)
// releases its claim with the session: until then no other relay can take
// the rows, afterwards another relay republishes them, de-duplicated.
func TestDeadSessionReleasesClaim(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	enqueue(t, db.Pool, msg("ev-1", ""), msg("ev-2", "K"))

	stuck := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	published, release := make(chan struct{}), make(chan struct{})
	relay.SetAfterPublish(stuck, func([]string) error {
		close(published)
		<-release
		return nil
	})
	stuckDone := make(chan error, 1)
	go func() {
		_, err := stuck.RunOnce(ctx)
		stuckDone <- err
	}()
	<-published
	if got := ns.StreamMsgs(t, stream.Events); got != 2 {
		t.Fatalf("stream holds %d msgs, want 2", got)
	}

	other := relay.NewRelay(db.Pool, ns.JS, fastOpts())
	if n, err := other.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second relay published %d, %v while the rows were claimed", n, err)
	}
	// The stuck relay's session dies.
	if n := db.Count(t, `SELECT count(*) FROM (
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction') t`); n != 1 {
		t.Fatalf("terminated %d sessions, want the stuck relay's", n)
	}
	close(release)
	if err := <-stuckDone; err == nil {
		t.Fatal("stuck relay's round succeeded without its session")
	}

	hookbridgetest.Eventually(t, time.Minute, "claim released", func() bool {
		n, err := other.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n == 2
	})
	if got := ns.StreamMsgs(t, stream.Events); got != 2 {
		t.Fatalf("stream holds %d msgs after the retry, want 2", got)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent' AND attempts = 0`); n != 2 {
		t.Fatalf("sent rows = %d, want 2", n)
	}
}

// claimCounter counts the relay's claim statements on the connections of
// the pool it traces.
type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "FOR UPDATE SKIP LOCKED") && strings.Contains(data.SQL, "LIMIT $1") {
		c.n.Add(1)
	}
	return ctx
}

func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery sees the claim: it is sent in a batch with the
// transaction's idle timeout.
func (c *claimCounter) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: data.SQL})
}

func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// quiet waits until no claim has been made for half a second (a minute at
// most) and returns the count then: the relay's rounds are over and it
// waits. A fixed pause is not enough on a loaded machine, where a round
// due now may start seconds later.
func (c *claimCounter) quiet(t *testing.T) int64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last, since := c.n.Load(), time.Now()
	for time.Since(since) < 500*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("the relay kept claiming for a minute (%d claims)", c.n.Load())
		}
		time.Sleep(10 * time.Millisecond)
		if n := c.n.Load(); n != last {
			last, since = n, time.Now()
		}
	}
	return last
}

// A round that dealt with every row it claimed, and claimed fewer than
// its limit, is not followed by another one at once: the rows committed
// later notify the relay. Each commit of a few rows costs one claim, not
// two (the second, empty, took three round trips and a next-due query).
func TestRelayClaimsOnceForEachCommitOfFewRows(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	claims := &claimCounter{}
	cfg.ConnConfig.Tracer = claims
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	opts := fastOpts()
	opts.PollInterval = time.Hour // only notifications wake it
	r := relay.NewRelay(pool, ns.JS, opts)
	listening := listened(r)
	runRelay(t, r)
	<-listening
	hookbridgetest.Eventually(t, time.Minute, "the start-up round", func() bool { return claims.n.Load() >= 1 })
	before := claims.quiet(t) // settled into its wait

	const commits = 5
	for i := range commits {
		enqueue(t, db.Pool, msg(fmt.Sprintf("few-%d-a", i), ""), msg(fmt.Sprintf("few-%d-b", i), ""))
		hookbridgetest.Eventually(t, time.Minute, "the commit's rows sent", func() bool {
			return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == 2*(i+1)
		})
		claims.quiet(t) // an extra round, if any, has run
	}
	if got := claims.n.Load() - before; got != commits {
		t.Fatalf("%d claims for %d commits of 2 rows, want one each", got, commits)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != 2*commits {
		t.Fatalf("EVENTS holds %d messages, want %d", got, 2*commits)
	}
}

// Two relays split a key: this relay claims the key's head, another holds
// the next row and, blocked behind the head, can do nothing with it (here
// a transaction of the test plays the other relay). Once this relay has
// published the head it must go round again for the next row: no insert
// will notify anyone, and the other relay's round is over.
func TestRelayGoesAgainForTheRowAnotherRelayHeldBehindItsChain(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	opts := fastOpts()
	opts.PollInterval = time.Hour // only notifications, or going again, wake it
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	listening := listened(r)
	atGate, gate, other := make(chan struct{}), make(chan struct{}), make(chan pgx.Tx, 1)
	var gateOnce, otherOnce sync.Once
	relay.SetBeforePublish(r, func(id string) error {
		switch id {
		case "gate":
			// The round that publishes it waits while the key's rows
			// are written.
			gateOnce.Do(func() { close(atGate) })
			<-gate
		case "held-1":
			// The round has planned (it saw held-2 locked); the other
			// relay now lets go of held-2 without having published it.
			otherOnce.Do(func() {
				if err := (<-other).Commit(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		return nil
	})
	runRelay(t, r)
	<-listening
	time.Sleep(100 * time.Millisecond) // the start-up rounds are over

	enqueue(t, db.Pool, msg("gate", "")) // its notification starts a round, held at the gate
	select {
	case <-atGate:
	case <-time.After(time.Minute):
		t.Fatal("no round reached the gate")
	}
	enqueue(t, db.Pool, msg("held-1", "K"), msg("held-2", "K")) // notifies the next round
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed by the hook
	if _, err := tx.Exec(ctx, `SELECT id FROM hookbridge.outbox_rows WHERE event_id = 'held-2' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	other <- tx
	close(gate)

	hookbridgetest.Eventually(t, time.Minute, "every row sent", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == 3
	})
	var got []string
	for _, m := range eventsMsgs(t, ns.JS) {
		got = append(got, m.id)
	}
	if !slices.Equal(got, []string{"gate", "held-1", "held-2"}) {
		t.Fatalf("EVENTS holds %v, want gate, held-1, held-2", got)
	}
}

// The other side of the split: this relay's rows of a key wait behind a
// due head another relay holds (here a transaction of the test, which
// then marks the head sent as that relay would). Nothing notifies this
// relay when the head is done, so it looks again after BackoffBase rather
// than waiting for its poll.
func TestRelayLooksAgainSoonBehindAHeadHeldElsewhere(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()
	enqueue(t, db.Pool, msg("head-1", "K"), msg("head-2", "K"))
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `SELECT id FROM hookbridge.outbox_rows WHERE event_id = 'head-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	opts := fastOpts()
	opts.PollInterval = time.Hour // the wait for head-2 below is far shorter
	r := relay.NewRelay(db.Pool, ns.JS, opts)
	listening := listened(r)
	runRelay(t, r)
	<-listening
	time.Sleep(300 * time.Millisecond) // its rounds so far found head-2 blocked
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`); n != 0 {
		t.Fatalf("%d rows sent while the key's head was held elsewhere", n)
	}
	if _, err := tx.Exec(ctx, `UPDATE hookbridge.outbox SET status = 'sent', sent_at = now() WHERE event_id = 'head-1'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, time.Minute, "head-2 sent", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE event_id = 'head-2' AND status = 'sent'`) == 1
	})
}
