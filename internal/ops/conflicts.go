package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Conflict is one row of hookbridge.conflicts (the store's row type).
type Conflict = store.Conflict

// ConflictPage selects one page of conflicts (newest first).
type ConflictPage = store.ConflictPageParams

// ListConflicts returns one page of conflicts, without bodies.
func (o *Ops) ListConflicts(ctx context.Context, p ConflictPage) (Page[ConflictView], error) {
	switch p.Resolved {
	case "", store.Unresolved, store.OnlyResolved, store.AnyResolved:
	default:
		return Page[ConflictView]{}, fmt.Errorf("resolved %q: use true, false or all: %w", p.Resolved, ErrInvalid)
	}
	rows, err := store.ConflictPage(ctx, o.Pool, p)
	if err != nil {
		return Page[ConflictView]{}, fmt.Errorf("list conflicts: %w", err)
	}
	items := make([]ConflictView, 0, len(rows))
	var last int64
	for _, c := range rows {
		items = append(items, ViewConflict(c))
		last = c.ID
	}
	return newPage(items, p.Limit, last), nil
}

// ShowConflict returns one conflict with its rejected body and, when
// HOOKS still holds it, the original body.
func (o *Ops) ShowConflict(ctx context.Context, id int64) (ConflictWithBodies, error) {
	c, err := store.ConflictGet(ctx, o.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConflictWithBodies{}, fmt.Errorf("conflict %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return ConflictWithBodies{}, fmt.Errorf("get conflict %d: %w", id, err)
	}
	rejected := c.RejectedBody
	if rejected == nil {
		rejected = []byte{}
	}
	out := ConflictWithBodies{ConflictView: ViewConflict(c), RejectedBody: bodyText(rejected), RejectedBodyBase64: bodyBase64(rejected)}
	original, missing := o.originalBody(ctx, c)
	out.OriginalBody, out.OriginalBodyBase64, out.OriginalMissing = bodyText(original), bodyBase64(original), missing
	return out, nil
}

// originalBody reads the first-applied body of c from HOOKS: by its
// sequence when known, else (a conflict a consumer found) by the inbox's
// sequence for that consumer.
func (o *Ops) originalBody(ctx context.Context, c Conflict) ([]byte, string) {
	if o.JS == nil {
		return nil, "no JetStream connection"
	}
	seq := uint64(c.OriginalSeq)
	if seq == 0 && c.DetectedBy != engine.IngressConflictDetector {
		rows, err := store.InboxListForEvent(ctx, o.Pool, []string{c.DetectedBy}, c.Source, c.EventID)
		if err == nil && len(rows) == 1 {
			seq = rows[0].StreamSeq
		}
	}
	if seq == 0 {
		return nil, "the original's stream sequence is unknown"
	}
	s, err := o.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		return nil, "stream " + stream.Hooks + ": " + engine.ShortError(err.Error())
	}
	raw, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Sprintf("message %d has left the HOOKS stream", seq)
	}
	if err != nil {
		return nil, engine.ShortError(err.Error())
	}
	if raw.Header.Get(stream.HeaderSource) != c.Source || raw.Header.Get(stream.HeaderEventID) != c.EventID {
		return nil, fmt.Sprintf("message %d is another event now", seq)
	}
	if raw.Data == nil {
		return []byte{}, ""
	}
	return raw.Data, ""
}

// ResolveConflict marks one conflict resolved with the operator's
// resolution; a resolved conflict keeps its first resolution.
func (o *Ops) ResolveConflict(ctx context.Context, id int64, resolution string) (string, error) {
	resolution = strings.TrimSpace(resolution)
	if resolution == "" {
		return "", fmt.Errorf("resolve conflict %d: a resolution is required: %w", id, ErrInvalid)
	}
	if _, err := store.ConflictGet(ctx, o.Pool, id); errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("conflict %d: %w", id, ErrNotFound)
	} else if err != nil {
		return "", fmt.Errorf("get conflict %d: %w", id, err)
	}
	changed, err := store.ConflictResolve(ctx, o.Pool, id, engine.ShortError(resolution))
	if err != nil {
		return "", fmt.Errorf("resolve conflict %d: %w", id, err)
	}
	if !changed {
		return StatusAlreadyResolved, nil
	}
	return StatusResolved, nil
}
