package loadgen

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/store"
)

// walMark is the server's WAL position at one moment, and how many rows
// the other databases of the server had written by then.
type walMark struct {
	lsn         int64
	text        string // as Postgres writes it, for pg_waldump
	otherWrites int64
}

// WAL is the write-ahead log a run made Postgres write.
type WAL struct {
	Bytes         int64   `json:"bytes"`
	BytesPerEvent float64 `json:"bytes_per_event"`
	// From and To are the WAL positions (pg_waldump --start/--end).
	From string `json:"from_lsn"`
	To   string `json:"to_lsn"`
	// OtherWrites counts rows inserted, updated or deleted by the other
	// databases of the server during the run, as far as their statistics
	// were flushed: WAL is the whole server's, so anything above 0 means
	// Bytes includes someone else's.
	OtherWrites int64 `json:"other_databases_rows_written"`
}

func (w *WAL) String() string {
	if w == nil {
		return "not measured"
	}
	s := fmt.Sprintf("%.0f B per event (%.1f MB, %s to %s)", w.BytesPerEvent, float64(w.Bytes)/1e6, w.From, w.To)
	if w.OtherWrites > 0 {
		s += fmt.Sprintf(", NOT ALONE: other databases wrote %d rows meanwhile", w.OtherWrites)
	}
	return s
}

// readWAL reads the WAL insert position of pool's server and the rows the
// other databases wrote so far (pg_stat_database).
func readWAL(ctx context.Context, pool *pgxpool.Pool) (walMark, error) {
	var m walMark
	err := pool.QueryRow(ctx, `
		SELECT pg_wal_lsn_diff(l, '0/0')::bigint, l::text,
			(SELECT coalesce(sum(tup_inserted + tup_updated + tup_deleted), 0)::bigint
			   FROM pg_stat_database WHERE datname IS DISTINCT FROM current_database())
		FROM pg_current_wal_insert_lsn() AS l`).Scan(&m.lsn, &m.text, &m.otherWrites)
	if err != nil {
		return m, fmt.Errorf("read the WAL position: %w", err)
	}
	return m, nil
}

// walSince is the WAL written since from, per event.
func walSince(ctx context.Context, pool *pgxpool.Pool, from walMark, events int) (*WAL, error) {
	to, err := readWAL(ctx, pool)
	if err != nil {
		return nil, err
	}
	w := &WAL{Bytes: to.lsn - from.lsn, From: from.text, To: to.text, OtherWrites: max(0, to.otherWrites-from.otherWrites)}
	if events > 0 {
		w.BytesPerEvent = float64(w.Bytes) / float64(events)
	}
	return w, nil
}

// waitOutboxDrained waits until the outbox holds no pending row, at most
// timeout: the relay records a round after its PubAcks, so the last
// relayed event is seen a moment before its row's WAL is written.
func waitOutboxDrained(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pending, err := store.OutboxCountPending(ctx, pool)
		if err != nil {
			return fmt.Errorf("outbox pending rows: %w", err)
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outbox still holds %d pending rows after %s", pending, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
