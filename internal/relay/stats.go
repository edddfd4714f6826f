package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/store"
)

// Stats is a snapshot of the outbox for operators.
type Stats struct {
	Pending int64 // waiting to be published (including rows backing off)
	Dead    int64 // gave up after MaxAttempts or refused as malformed
	Sent    int64 // published and not yet deleted by retention
	// OldestPending is the age of the oldest pending row (0 if none): how
	// far behind the relays are.
	OldestPending time.Duration
}

// OutboxStats counts the outbox rows by status. Pending and dead rows are
// counted with their partial indexes; sent rows are all the others (one
// snapshot, so the difference is exact), counted over the primary key:
// an index of sent rows alone would cost an entry in nearly every row.
func OutboxStats(ctx context.Context, pool *pgxpool.Pool) (Stats, error) {
	c, err := store.OutboxStats(ctx, pool)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox stats: %w", err)
	}
	s := Stats{Pending: c.Pending, Dead: c.Dead, Sent: c.Sent}
	if ageMs := c.OldestPendingMs; ageMs != nil && *ageMs > 0 {
		s.OldestPending = time.Duration(*ageMs * float64(time.Millisecond))
	}
	return s, nil
}
