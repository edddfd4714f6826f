package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

func TestPruneInboxDeletesOnlyOldRows(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t) // empty: nothing in it can come back
	ctx := context.Background()
	// 2,500 old rows (more than one batch) and 10 recent ones.
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO hookbridge.inbox (consumer, source, event_id, event_type, body_sha256, stream_seq, applied_at)
		SELECT 'c', 'demo', 'old-' || g, 't', '\x00'::bytea, g, now() - interval '30 days'
		FROM generate_series(1, 2500) g
		UNION ALL
		SELECT 'c', 'demo', 'new-' || g, 't', '\x00'::bytea, 10000 + g, now()
		FROM generate_series(1, 10) g`); err != nil {
		t.Fatal(err)
	}
	n, _, err := engine.PruneInbox(ctx, db.Pool, ns.JS, time.Now(), 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2500 {
		t.Fatalf("pruned %d rows, want 2500", n)
	}
	if got := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); got != 10 {
		t.Fatalf("inbox rows left = %d, want the 10 recent ones", got)
	}
}

// Without HOOKS' state nothing tells which rows a message still needs:
// retention deletes nothing and says why, rather than prune by age alone.
func TestPruneInboxWithoutHooksDeletesNothing(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t) // no streams
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO hookbridge.inbox (consumer, source, event_id, event_type, body_sha256, stream_seq, applied_at)
		VALUES ('c', 'demo', 'old', 't', '\x00'::bytea, 1, now() - interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	n, _, err := engine.PruneInbox(ctx, db.Pool, ns.JS, time.Now(), time.Hour)
	if err == nil || !strings.Contains(err.Error(), stream.Hooks) || n != 0 {
		t.Fatalf("PruneInbox = %d, %v; want 0 and an error naming the stream", n, err)
	}
	if got := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); got != 1 {
		t.Fatalf("inbox rows left = %d, want 1", got)
	}
}

// applyCounter inserts a row per apply into retention_applies (no
// unique key: a second apply of an event is a second row) and counts its
// calls.
type applyCounter struct {
	name  string
	calls atomic.Int64
}

func (h *applyCounter) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	h.calls.Add(1)
	_, err := tx.Exec(ctx, `INSERT INTO retention_applies (consumer, event_id) VALUES ($1, $2)`, h.name, ev.ID)
	return err
}

// Two consumers read one source. audit is paused, so HOOKS keeps the
// messages it has not acknowledged, past any age, while orders applies
// them. The inbox is then pruned as if every row were old enough by age
// (retention 0, now an hour ahead): the rows of messages HOOKS no longer
// holds go, those of messages it still holds stay, and a replay of
// orders from sequence 1 (`hookbridge replay --from-seq 1`) applies
// nothing a second time. Pruned by age alone, every row went and the
// replay applied all of them again.
func TestPruneInboxKeepsRowsOfMessagesHooksHolds(t *testing.T) {
	t.Parallel()
	const gone, held = 5, 20
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE retention_applies (consumer text NOT NULL, event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	types := []string{"thing.done"}
	handlers := map[string]*applyCounter{"orders": {name: "orders"}, "audit": {name: "audit"}}
	for name, h := range handlers {
		startConsumer(t, db, ns, 1, engine.Options{Name: name, Sources: []string{"demo"}, EventTypes: types, Handler: h, AckWait: 5 * time.Second})
	}
	applies := func(name string) int {
		return db.Count(t, `SELECT count(*) FROM retention_applies WHERE consumer = $1`, name)
	}

	// Events both consumers applied and that then left HOOKS, as the
	// stream's limits remove them once nobody holds them.
	for i := range gone {
		ns.PublishHook(t, "demo", fmt.Sprintf("gone-%d", i), "thing.done", []byte(`{}`))
	}
	if n := db.AwaitCount(t, 2*gone, `SELECT count(*) FROM hookbridge.inbox`); n != 2*gone {
		t.Fatalf("inbox rows = %d, want %d", n, 2*gone)
	}
	hooks, err := ns.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := hooks.Purge(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := ns.JS.PauseConsumer(ctx, stream.Hooks, "audit", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("pause audit: %v", err)
	}
	for i := range held {
		ns.PublishHook(t, "demo", fmt.Sprintf("held-%d", i), "thing.done", []byte(`{}`))
	}
	if n := db.AwaitCount(t, gone+held, `SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'orders'`); n != gone+held {
		t.Fatalf("orders' inbox rows = %d, want %d", n, gone+held)
	}
	hookbridgetest.Eventually(t, time.Minute, "audit's durable holding the new messages", func() bool {
		info, err := ns.JS.Consumer(ctx, stream.Hooks, "audit")
		return err == nil && info.CachedInfo().NumPending+uint64(info.CachedInfo().NumAckPending) == held
	})
	before := fmt.Sprintf("orders applies=%d calls=%d, audit applies=%d calls=%d",
		applies("orders"), handlers["orders"].calls.Load(), applies("audit"), handlers["audit"].calls.Load())

	n, _, err := engine.PruneInbox(ctx, db.Pool, ns.JS, time.Now().Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2*gone {
		t.Fatalf("pruned %d inbox rows, want the %d of messages HOOKS no longer holds", n, 2*gone)
	}
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'orders' AND event_id LIKE 'held-%'`); got != held {
		t.Fatalf("orders' inbox rows of held messages = %d, want %d", got, held)
	}

	sum, err := engine.Replay(ctx, db.Pool, ns.JS, engine.ReplayOptions{
		Consumer: "orders", Handler: handlers["orders"], Sources: []string{"demo"}, EventTypes: types, FromSeq: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if sum.Selected != held || sum.Processed != 0 || sum.Duplicate != held {
		t.Fatalf("replay from seq 1 = %+v, want %d duplicates and nothing processed", sum, held)
	}
	after := fmt.Sprintf("orders applies=%d calls=%d, audit applies=%d calls=%d",
		applies("orders"), handlers["orders"].calls.Load(), applies("audit"), handlers["audit"].calls.Load())
	if after != before {
		t.Fatalf("applies changed: %s -> %s", before, after)
	}
	if got := applies("orders"); got != gone+held {
		t.Fatalf("orders applied %d events, want each of %d once", got, gone+held)
	}
}
