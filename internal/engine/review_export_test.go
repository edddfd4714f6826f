package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CountFailure exposes the failure counter's upsert to the external tests
// of its races with a concurrent apply.
func CountFailure(ctx context.Context, pool *pgxpool.Pool, consumer string, ev Event, cause error) (int, error) {
	return countFailure(ctx, pool, consumer, ev, cause, 30*time.Second)
}
