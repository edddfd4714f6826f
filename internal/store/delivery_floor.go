package store

import (
	"context"
	"fmt"
)

var sqlDeliveryEventsFloor = load("delivery_events_floor.sql")

// DeliveryEventsFloor returns the lowest EVENTS sequence a pending
// delivery still reads from EVENTS; ok is false when none does.
func DeliveryEventsFloor(ctx context.Context, q Querier) (seq uint64, ok bool, err error) {
	var v *int64
	if err := q.QueryRow(ctx, sqlDeliveryEventsFloor).Scan(&v); err != nil {
		return 0, false, fmt.Errorf("lowest EVENTS sequence of the pending deliveries: %w", err)
	}
	if v == nil || *v < 0 {
		return 0, false, nil
	}
	return uint64(*v), true, nil
}
