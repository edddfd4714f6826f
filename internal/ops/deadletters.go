package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/store"
)

// Statuses the idempotent actions answer with.
const (
	StatusRequeued        = "requeued"
	StatusDiscarded       = "discarded"
	StatusResolved        = "resolved"
	StatusAlreadyResolved = "already_resolved"
	StatusNotDead         = "not_dead"
)

// DeadLetter is one row of the dead letters (the store's row type).
type DeadLetter = store.DeadLetter

// DeadLetterPage selects one page of dead letters (newest first).
type DeadLetterPage = store.DeadLetterPageParams

// ListDeadLetters returns one page of dead letters, without bodies.
func (o *Ops) ListDeadLetters(ctx context.Context, p DeadLetterPage) (Page[DeadLetterView], error) {
	switch p.Resolved {
	case "", store.Unresolved, store.OnlyResolved, store.AnyResolved:
	default:
		return Page[DeadLetterView]{}, fmt.Errorf("resolved %q: use true, false or all: %w", p.Resolved, ErrInvalid)
	}
	rows, err := store.DeadLetterPage(ctx, o.Pool, p)
	if err != nil {
		return Page[DeadLetterView]{}, fmt.Errorf("list dead letters: %w", err)
	}
	items := make([]DeadLetterView, 0, len(rows))
	var last int64
	for _, d := range rows {
		items = append(items, ViewDeadLetter(d))
		last = d.ID
	}
	return newPage(items, p.Limit, last), nil
}

// ShowDeadLetter returns one dead letter with its body.
func (o *Ops) ShowDeadLetter(ctx context.Context, id int64) (DeadLetterWithBody, error) {
	d, err := o.getDeadLetter(ctx, id)
	if err != nil {
		return DeadLetterWithBody{}, err
	}
	b := d.Body
	if b == nil {
		b = []byte{}
	}
	return DeadLetterWithBody{DeadLetterView: ViewDeadLetter(d), Body: bodyText(b), BodyBase64: bodyBase64(b)}, nil
}

// getDeadLetter reads one dead letter's row with its body.
func (o *Ops) getDeadLetter(ctx context.Context, id int64) (DeadLetter, error) {
	d, err := store.DeadLetterGet(ctx, o.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	return d, nil
}

// RequeueResult is what requeueing one dead letter did.
type RequeueResult struct {
	ID        int64  `json:"id"`
	Status    string `json:"status"` // requeued or already_resolved
	StreamSeq uint64 `json:"stream_seq"`
	// Outcome is the apply's outcome (processed, or duplicate when the
	// effect was there already); empty when nothing was re-delivered.
	Outcome string `json:"outcome,omitempty"`
	// OutOfOrder says the event was applied after a later event of its
	// ordering key (PassedBy): the operator asked for it, or the later
	// event applied while the requeue ran.
	OutOfOrder bool      `json:"out_of_order,omitempty"`
	PassedBy   *PassedBy `json:"passed_by,omitempty"`
}

// RequeueOptions are the operator's choices for one requeue.
type RequeueOptions struct {
	// OutOfOrder applies a dead letter even when a later event of its
	// ordering key has applied since it was dead-lettered.
	OutOfOrder bool
}

// RequeueDeadLetter re-delivers one dead letter's message, read back from
// HOOKS by its sequence, through the consumer's inbox, exactly like
// `replay --dead-letters` narrowed to that row, and marks the row
// resolved "requeued" once its event applied (or was applied before). A
// resolved row is left alone: a second requeue changes nothing. When
// the event fails again the row stays unresolved with the new error and
// the error wraps [ErrNotApplied]. A dead letter that a later event of
// its ordering key has passed is refused with a [*PassedError] (nothing
// is applied) unless opts.OutOfOrder is set.
func (o *Ops) RequeueDeadLetter(ctx context.Context, id int64, opts RequeueOptions) (RequeueResult, error) {
	d, err := o.getDeadLetter(ctx, id)
	if err != nil {
		return RequeueResult{}, err
	}
	res := RequeueResult{ID: id, StreamSeq: d.StreamSeq, Status: StatusAlreadyResolved}
	if d.ResolvedAt != nil {
		return res, nil
	}
	if pb := Passed(d); pb != nil && !opts.OutOfOrder {
		return RequeueResult{}, &PassedError{ID: id, StreamSeq: d.StreamSeq, PassedBy: *pb}
	}
	if o.JS == nil {
		return RequeueResult{}, fmt.Errorf("requeue dead letter %d: %w", id, errNoJetStream)
	}
	item, err := o.requeueApply(ctx, d, opts.OutOfOrder)
	if err != nil {
		return RequeueResult{}, err
	}
	if item != nil && item.Outcome == consumer.ReplayHeld {
		// A later event of its key passed it after the check above: the
		// apply found the mark under the row's lock and applied nothing.
		now, err := o.getDeadLetter(ctx, id)
		if err != nil {
			return RequeueResult{}, err
		}
		pb := Passed(now)
		if pb == nil {
			return RequeueResult{}, fmt.Errorf("requeue dead letter %d: %s: %w", id, item.Error, ErrNotApplied)
		}
		return RequeueResult{}, &PassedError{ID: id, StreamSeq: d.StreamSeq, PassedBy: *pb}
	}
	if item == nil {
		// Resolved between the read and the apply: by another requeue or
		// replay, or discarded. The replay applies a dead letter under its
		// row's lock and resolves it in the same transaction, so nothing
		// was applied here.
		return res, nil
	}
	res.Outcome = item.Outcome.String()
	switch {
	case item.Resolved:
		res.Status = StatusRequeued
		o.notePassed(ctx, d, item.Outcome, &res)
		return res, nil
	case Applied(item.Outcome):
		// Applied, but the row was not resolved (it cannot be while the
		// apply holds its lock; kept for safety): nothing more to do.
		return res, nil
	case item.Outcome == consumer.ReplayMissing:
		return res, fmt.Errorf("requeue dead letter %d: message %d has left the HOOKS stream (max_age or max_bytes); it can only be discarded: %w", id, d.StreamSeq, ErrNotApplied)
	default:
		msg := item.Outcome.String()
		if item.Error != "" {
			msg += ": " + item.Error
		}
		return res, fmt.Errorf("requeue dead letter %d: %s: %w", id, msg, ErrNotApplied)
	}
}

// requeueApply replays d's message alone and returns what became of it
// (nil: the row was resolved meanwhile, nothing was applied).
func (o *Ops) requeueApply(ctx context.Context, d DeadLetter, outOfOrder bool) (*engine.ReplayItem, error) {
	opts, err := o.replayOptions(d.Consumer, ReplaySelectors{DeadLetters: true, FromSeq: d.StreamSeq, ToSeq: d.StreamSeq, EventID: d.EventID, OutOfOrder: outOfOrder})
	if err != nil {
		return nil, fmt.Errorf("requeue dead letter %d: %w", d.ID, err)
	}
	opts.Resolution = engine.ResolutionRequeued
	var item *engine.ReplayItem
	opts.Report = func(it engine.ReplayItem) { item = &it }
	if _, err := o.runReplay(ctx, opts); err != nil {
		return nil, fmt.Errorf("requeue dead letter %d: %w", d.ID, err)
	}
	return item, nil
}

// notePassed says in res whether the requeued keyed event d applied after
// a later event of its key. The row is read again: the later event may
// have applied, and marked it, while the requeue ran.
func (o *Ops) notePassed(ctx context.Context, d DeadLetter, outcome consumer.Outcome, res *RequeueResult) {
	if d.OrderingKey == "" || outcome != consumer.Processed {
		return
	}
	pb := Passed(d)
	if pb == nil {
		if now, err := o.getDeadLetter(ctx, d.ID); err == nil {
			pb = Passed(now)
		}
	}
	if pb != nil {
		res.OutOfOrder, res.PassedBy = true, pb
	}
}

// DiscardDeadLetter marks one dead letter resolved "discarded" with the
// operator's reason; the row is kept. A resolved row is left alone.
func (o *Ops) DiscardDeadLetter(ctx context.Context, id int64, reason string) (string, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return "", fmt.Errorf("discard dead letter %d: a reason is required: %w", id, ErrInvalid)
	}
	if _, err := o.getDeadLetter(ctx, id); err != nil {
		return "", err
	}
	changed, err := store.DeadLetterDiscard(ctx, o.Pool, id, engine.ShortError(reason))
	if err != nil {
		return "", fmt.Errorf("discard dead letter %d: %w", id, err)
	}
	if !changed {
		return StatusAlreadyResolved, nil
	}
	return StatusDiscarded, nil
}
