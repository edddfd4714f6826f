package delivery

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/store"
)

// EventsFloor is the lowest EVENTS sequence a delivery Postgres tracks
// (failing, parked, replayed, or requeued without a copy of its body)
// still reads from EVENTS; ok is false when none does. The storage guard
// trims EVENTS only below it and below every endpoint's durable's floor.
// Read it after the durables: a failed delivery is written here before
// its message is acked, so a sequence leaves the durable's floor only
// once this floor holds it.
func EventsFloor(ctx context.Context, pool *pgxpool.Pool) (seq uint64, ok bool, err error) {
	return store.DeliveryEventsFloor(ctx, pool)
}
