package store

import "context"

var (
	sqlDeadLetterResolveForEvent = load("dead_letter_resolve_for_event.sql")
	sqlConflictResolveForEvent   = load("conflict_resolve_for_event.sql")
)

// DeadLetterResolveForEvent marks every unresolved dead letter of the
// consumer's event (source, eventID) resolved with resolution and note;
// it returns how many rows changed.
func DeadLetterResolveForEvent(ctx context.Context, q Querier, consumer, source, eventID, resolution, note string) (int64, error) {
	tag, err := q.Exec(ctx, sqlDeadLetterResolveForEvent, consumer, source, eventID, resolution, note)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ConflictResolveForEvent marks every unresolved conflict of the event
// (source, eventID) resolved with resolution; it returns how many rows
// changed.
func ConflictResolveForEvent(ctx context.Context, q Querier, source, eventID, resolution string) (int64, error) {
	tag, err := q.Exec(ctx, sqlConflictResolveForEvent, source, eventID, resolution)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
