package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/internal/store"
)

// ListOutbox returns one page of the outbox rows in state "dead" or
// "pending", newest first, with ids below before (0: from the newest).
func (o *Ops) ListOutbox(ctx context.Context, state string, before int64, limit int) (Page[OutboxView], error) {
	if state != "dead" && state != "pending" {
		return Page[OutboxView]{}, fmt.Errorf("outbox state %q: use dead or pending: %w", state, ErrInvalid)
	}
	rows, err := store.OutboxPage(ctx, o.Pool, state, before, limit)
	if err != nil {
		return Page[OutboxView]{}, fmt.Errorf("list outbox: %w", err)
	}
	items := make([]OutboxView, 0, len(rows))
	var last int64
	for _, r := range rows {
		items = append(items, OutboxView{ID: r.ID, EventID: r.EventID, Subject: r.Subject, Attempts: r.Attempts, LastError: r.LastError,
			CreatedAt: r.CreatedAt.UTC(), NextAttemptAt: r.NextAttemptAt.UTC()})
		last = r.ID
	}
	return newPage(items, limit, last), nil
}

// RequeueOutbox puts one dead outbox row back to pending with its
// attempts reset, due now, and wakes the relays. A row that is not dead
// is left alone ("not_dead").
func (o *Ops) RequeueOutbox(ctx context.Context, id int64) (string, error) {
	changed, err := store.OutboxRequeue(ctx, o.Pool, id)
	if err != nil {
		return "", fmt.Errorf("requeue outbox row %d: %w", id, err)
	}
	if changed {
		return StatusRequeued, nil
	}
	if exists, err := o.outboxExists(ctx, id); err != nil {
		return "", err
	} else if !exists {
		return "", fmt.Errorf("outbox row %d: %w", id, ErrNotFound)
	}
	return StatusNotDead, nil
}

func (o *Ops) outboxExists(ctx context.Context, id int64) (bool, error) {
	_, err := store.OutboxGetByID(ctx, o.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read outbox row %d: %w", id, err)
	}
	return true, nil
}
