package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

func TestPruneInboxDeletesOnlyOldRows(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
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
	n, err := engine.PruneInbox(ctx, db.Pool, time.Now().Add(-7*24*time.Hour))
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
