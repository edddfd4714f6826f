package store

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sqlConflictInsert          = load("conflict_insert.sql")
	sqlConflictInsertMany      = load("conflict_insert_many.sql")
	sqlConflictGet             = load("conflict_get.sql")
	sqlConflictCount           = load("conflict_count.sql")
	sqlConflictPage            = load("conflict_page.sql")
	sqlConflictResolve         = load("conflict_resolve.sql")
	sqlConflictCountUnresolved = load("conflict_count_unresolved.sql")
	sqlConflictListForEvent    = load("conflict_list_for_event.sql")
)

// Conflict is one row of hookbridge.conflicts: an event id applied (or
// published) before with another body.
type Conflict struct {
	ID             int64  // set when read
	DetectedBy     string // "ingress" or a consumer name
	Source         string
	EventID        string
	EventType      string
	OriginalSHA256 []byte // nil when unknown
	OriginalSeq    int64  // 0 when unknown
	RejectedSHA256 []byte // set when read; computed from RejectedBody when written
	RejectedSeq    int64  // 0 when unknown
	RejectedBody   []byte // nil when read by ConflictPage
	DetectedAt     time.Time
	ResolvedAt     *time.Time // nil while unresolved
	Resolution     string
}

// rejectedBody is the rejected_body column of c: the column is NOT NULL,
// so an empty body is stored empty.
func rejectedBody(c Conflict) []byte {
	if c.RejectedBody == nil {
		return []byte{}
	}
	return c.RejectedBody
}

// ConflictInsert inserts c; inserting the same conflict twice (same
// detector, event and rejected body) keeps one row.
func ConflictInsert(ctx context.Context, q Querier, c Conflict) error {
	sum := sha256.Sum256(c.RejectedBody)
	_, err := q.Exec(ctx, sqlConflictInsert,
		c.DetectedBy, c.Source, c.EventID, c.EventType, c.OriginalSHA256, c.OriginalSeq, sum[:], c.RejectedSeq, rejectedBody(c))
	return err
}

// ConflictInsertMany is ConflictInsert for many conflicts of one detector
// (cs[0].DetectedBy), in one statement. cs must not be empty.
func ConflictInsertMany(ctx context.Context, q Querier, cs []Conflict) error {
	n := len(cs)
	sources, ids, types := make([]string, n), make([]string, n), make([]string, n)
	origSHA, rejSHA, bodies := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	origSeq, rejSeq := make([]int64, n), make([]int64, n)
	for i, c := range cs {
		sum := sha256.Sum256(c.RejectedBody)
		sources[i], ids[i], types[i] = c.Source, c.EventID, c.EventType
		origSHA[i], origSeq[i] = c.OriginalSHA256, c.OriginalSeq
		rejSHA[i], rejSeq[i], bodies[i] = sum[:], c.RejectedSeq, rejectedBody(c)
	}
	_, err := q.Exec(ctx, sqlConflictInsertMany, cs[0].DetectedBy, sources, ids, types, origSHA, origSeq, rejSHA, rejSeq, bodies)
	return err
}

func scanConflict(row pgx.CollectableRow, body bool) (Conflict, error) {
	var c Conflict
	dest := []any{&c.ID, &c.DetectedBy, &c.Source, &c.EventID, &c.EventType, &c.OriginalSHA256, &c.OriginalSeq,
		&c.RejectedSHA256, &c.RejectedSeq, &c.DetectedAt, &c.ResolvedAt, &c.Resolution}
	if body {
		dest = append(dest, &c.RejectedBody)
	}
	err := row.Scan(dest...)
	if len(c.OriginalSHA256) == 0 {
		c.OriginalSHA256 = nil
	}
	return c, err
}

// ConflictGet returns one conflict with its rejected body, or
// pgx.ErrNoRows.
func ConflictGet(ctx context.Context, q Querier, id int64) (Conflict, error) {
	rows, err := q.Query(ctx, sqlConflictGet, id)
	if err != nil {
		return Conflict{}, err
	}
	return pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Conflict, error) { return scanConflict(row, true) })
}

// ConflictCount counts all conflicts.
func ConflictCount(ctx context.Context, q Querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, sqlConflictCount).Scan(&n)
	return n, err
}

// ConflictPageParams selects one page of conflicts for an operator.
type ConflictPageParams struct {
	Resolved Resolved // "" means Unresolved
	Before   int64    // ids below this one (0: from the newest)
	Limit    int
}

// ConflictPage returns one page of conflicts, newest first, without
// bodies.
func ConflictPage(ctx context.Context, q Querier, p ConflictPageParams) ([]Conflict, error) {
	if p.Resolved == "" {
		p.Resolved = Unresolved
	}
	rows, err := q.Query(ctx, sqlConflictPage, string(p.Resolved), p.Before, p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Conflict, error) { return scanConflict(row, false) })
}

// ConflictResolve marks the unresolved conflict id resolved; it reports
// whether a row changed.
func ConflictResolve(ctx context.Context, q Querier, id int64, resolution string) (bool, error) {
	tag, err := q.Exec(ctx, sqlConflictResolve, id, resolution)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// ConflictCountUnresolved counts the conflicts nobody resolved yet.
func ConflictCountUnresolved(ctx context.Context, q Querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, sqlConflictCountUnresolved).Scan(&n)
	return n, err
}

// ConflictListForEvent returns the conflicts of one event found by any of
// detectors, without bodies.
func ConflictListForEvent(ctx context.Context, q Querier, detectors []string, source, eventID string) ([]Conflict, error) {
	rows, err := q.Query(ctx, sqlConflictListForEvent, detectors, source, eventID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Conflict, error) { return scanConflict(row, false) })
}
