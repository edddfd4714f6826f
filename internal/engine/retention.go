package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
)

// pruneBatch bounds one DELETE so retention never holds long locks or
// writes a huge transaction.
const pruneBatch = 1000

// PruneInbox deletes inbox rows applied before olderThan, in batches, and
// returns how many it deleted. An inbox row is what makes a redelivery or
// replay a duplicate, so olderThan must lie before anything that can still
// come back: the HOOKS stream's max age (the configuration enforces it).
func PruneInbox(ctx context.Context, pool *pgxpool.Pool, olderThan time.Time) (int64, error) {
	var total int64
	for {
		n, err := store.InboxPrune(ctx, pool, olderThan, pruneBatch)
		if err != nil {
			return total, fmt.Errorf("prune inbox: %w", err)
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}

// RunInboxRetention prunes rows older than retention every interval until
// ctx is cancelled.
func RunInboxRetention(ctx context.Context, pool *pgxpool.Pool, retention, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := PruneInbox(ctx, pool, time.Now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("inbox retention failed; will retry", "err", errtext.ForLog(err))
		case n > 0:
			log.Info("inbox rows pruned", "rows", n, "older_than", retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
