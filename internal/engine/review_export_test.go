package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
)

// CountFailure exposes the failure counter's upsert to the external tests
// of its races with a concurrent apply.
func CountFailure(ctx context.Context, pool *pgxpool.Pool, consumerName string, ev consumer.Event, cause error) (int, error) {
	return countFailure(ctx, pool, consumerName, ev, cause, 30*time.Second)
}
