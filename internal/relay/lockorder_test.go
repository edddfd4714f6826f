package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// keyLockClass is the first half of the outbox's per-key advisory lock
// (the row trigger and outbox_write take (keyLockClass, hashtext(key))).
const keyLockClass = 1751281664

// Two transactions write messages of keys a and b, one in the order
// (a, b), the other (b, a), interleaved as a deadlock needs them: the
// first waits for a while the second takes b and then waits for a too.
// Taking the keys in the order they appear, the first then got a and
// waited for b, held by the second, waiting for a: Postgres aborted one
// (40P01). Both commit now, as one pack each and as rows, and the relay
// publishes each key's messages in commit order.
func TestOppositeKeyOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	for _, packed := range []bool{true, false} {
		name := map[bool]string{true: "packs", false: "rows"}[packed]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t)
			ns := hookbridgetest.NATS(t)
			ctx := context.Background()
			a, b := "customer-a", "customer-b"
			mk := func(tx, key string) publisher.Message {
				if packed {
					return applied(tx+"-"+key, key)
				}
				return msg(tx+"-"+key, key)
			}
			first := []publisher.Message{mk("t1", a), mk("t1", b)}
			second := []publisher.Message{mk("t2", b), mk("t2", a)}

			// A third transaction holds a's lock until both writers wait.
			gate, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer gate.Rollback(ctx) //nolint:errcheck // committed below
			if _, err := gate.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, keyLockClass, a); err != nil {
				t.Fatal(err)
			}

			done1 := startWrite(t, db.Pool, packed, first)
			done2 := startWrite(t, db.Pool, packed, second)
			// The first must queue on a before the second starts, so that
			// it is granted a first once the gate opens.
			done1.start <- struct{}{}
			awaitWaiting(t, db, done1.pid)
			done2.start <- struct{}{}
			awaitWaiting(t, db, done2.pid)
			if err := gate.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			for i, d := range []*write{done1, done2} {
				if err := <-d.err; err != nil {
					t.Fatalf("transaction %d: %v", i+1, err)
				}
			}

			runRelay(t, relay.NewRelay(db.Pool, ns.JS, fastOpts()))
			if n := db.AwaitCount(t, 4, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`); n != 4 {
				t.Fatalf("sent outbox messages = %d, want 4", n)
			}
			if n := ns.StreamMsgs(t, stream.Events); n != 4 {
				t.Fatalf("EVENTS holds %d messages, want 4", n)
			}
			seq := map[string]uint64{}
			for _, m := range eventsMsgs(t, ns.JS) {
				seq[m.id] = m.seq
			}
			// The first transaction committed first: it was granted a
			// first and took b after it (or, sorted, took both before the
			// second could take one).
			for i, key := range []string{a, b} {
				one, two := mk("t1", key).ID, mk("t2", key).ID
				if seq[one] == 0 || seq[two] == 0 || seq[one] > seq[two] {
					t.Fatalf("key %s: %s at seq %d, %s at %d; want both, in commit order (%d of 2)", key, one, seq[one], two, seq[two], i+1)
				}
			}
		})
	}
}

// write is one writing transaction run by [startWrite].
type write struct {
	pid   uint32
	start chan struct{} // the transaction begins when sent to
	err   chan error
}

// startWrite opens a connection and, in a goroutine, writes msgs in one
// transaction on it (claiming their events first when packed, so they go
// into one pack) once sent to start.
func startWrite(t *testing.T, pool *pgxpool.Pool, packed bool, msgs []publisher.Message) *write {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := &write{pid: conn.Conn().PgConn().PID(), start: make(chan struct{}, 1), err: make(chan error, 1)}
	go func() {
		defer conn.Release()
		<-w.start
		w.err <- pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if packed {
				if err := claimEvents(ctx, tx, msgs); err != nil {
					return fmt.Errorf("claim: %w", err)
				}
			}
			return publisher.EnqueueBatch(ctx, tx, msgs)
		})
	}()
	return w
}

// awaitWaiting waits until backend pid waits for an advisory lock.
func awaitWaiting(t *testing.T, db *hookbridgetest.Database, pid uint32) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, fmt.Sprintf("backend %d waiting for a key lock", pid), func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = $1`, int32(pid)) == 1
	})
}
