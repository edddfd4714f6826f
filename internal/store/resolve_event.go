package store

import "context"

var (
	sqlDeadLettersResolveEvent = load("dead_letters_resolve_event.sql")
	sqlConflictsResolveEvent   = load("conflicts_resolve_event.sql")
)

// ResolveDeadLettersOfEvent marks every unresolved dead letter of the
// consumer's event (source, eventID) resolved with resolution and note;
// it returns how many rows changed.
func ResolveDeadLettersOfEvent(ctx context.Context, q Querier, consumer, source, eventID, resolution, note string) (int64, error) {
	tag, err := q.Exec(ctx, sqlDeadLettersResolveEvent, consumer, source, eventID, resolution, note)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ResolveConflictsOfEvent marks every unresolved conflict of the event
// (source, eventID) resolved with resolution; it returns how many rows
// changed.
func ResolveConflictsOfEvent(ctx context.Context, q Querier, source, eventID, resolution string) (int64, error) {
	tag, err := q.Exec(ctx, sqlConflictsResolveEvent, source, eventID, resolution)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
