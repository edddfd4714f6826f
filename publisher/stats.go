package publisher

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

// OutboxStats counts the outbox rows by status. Each count uses its
// status's partial index.
func OutboxStats(ctx context.Context, pool *pgxpool.Pool) (Stats, error) {
	var s Stats
	var ageMs *float64
	err := pool.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending'),
			(SELECT count(*) FROM hookbridge.outbox WHERE status = 'dead'),
			(SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'),
			(SELECT extract(epoch FROM clock_timestamp() - min(created_at)) * 1000
			   FROM hookbridge.outbox WHERE status = 'pending')::float8`).
		Scan(&s.Pending, &s.Dead, &s.Sent, &ageMs)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox stats: %w", err)
	}
	if ageMs != nil && *ageMs > 0 {
		s.OldestPending = time.Duration(*ageMs * float64(time.Millisecond))
	}
	return s, nil
}
