package ops

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// ReplaySelectors choose what a replay re-delivers; they are the flags of
// `hookbridge replay` and the body of POST /api/v1/replay. Every one given
// must match.
type ReplaySelectors struct {
	FromSeq, ToSeq uint64    // HOOKS stream sequences, inclusive; 0 = open
	Since, Until   time.Time // stream times; Until is exclusive
	Type           string    // only this event type
	EventID        string    // only this event id
	// DeadLetters replays the consumer's unresolved dead letters
	// (narrowed by the other selectors) instead of a range.
	DeadLetters bool
	// DryRun reports per message what would happen, writing nothing.
	DryRun bool
	// OutOfOrder, with DeadLetters, also applies the dead letters that a
	// later event of their ordering key has passed; without it they are
	// left alone, counted and listed ([ReplayResult]).
	OutOfOrder bool
}

// ReplayPlan is a replay checked and resolved, ready to run: the one
// shape every caller (the CLI, the admin API, a dead letter's requeue)
// hands to [Ops.RunReplay], so that a request is checked once, before it
// is answered.
type ReplayPlan struct {
	sel  ReplaySelectors
	opts engine.ReplayOptions
}

// Consumer is the consumer the plan replays to.
func (p *ReplayPlan) Consumer() string { return p.opts.Consumer }

// Selectors are the plan's selectors.
func (p *ReplayPlan) Selectors() ReplaySelectors { return p.sel }

// PlanReplay checks the selectors against the consumer and resolves its
// handler and subscription, as serve does. A wrong selector is ErrInvalid.
func (o *Ops) PlanReplay(name string, sel ReplaySelectors) (*ReplayPlan, error) {
	opts, err := o.replayOptions(name, sel)
	if err != nil {
		return nil, err
	}
	return &ReplayPlan{sel: sel, opts: opts}, nil
}

// replayOptions builds the engine's options of a replay to consumer name.
func (o *Ops) replayOptions(name string, sel ReplaySelectors) (engine.ReplayOptions, error) {
	c, err := o.Consumer(name)
	if err != nil {
		return engine.ReplayOptions{}, err
	}
	switch {
	case sel.ToSeq > 0 && sel.FromSeq > sel.ToSeq:
		return engine.ReplayOptions{}, fmt.Errorf("from-seq %d is after to-seq %d: %w", sel.FromSeq, sel.ToSeq, ErrInvalid)
	case !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Since.Before(sel.Until):
		return engine.ReplayOptions{}, fmt.Errorf("since is not before until: %w", ErrInvalid)
	case sel.OutOfOrder && !sel.DeadLetters:
		return engine.ReplayOptions{}, fmt.Errorf("out of order goes with dead letters only (a range replay holds a key's events behind one that failed or is not applied, and the dead letters a later event passed): %w", ErrInvalid)
	case sel.Type != "" && !sel.DeadLetters && !slices.Contains(c.EventTypes, sel.Type):
		return engine.ReplayOptions{}, fmt.Errorf("consumer %s does not receive event type %q: %w", c.Name, sel.Type, ErrInvalid)
	}
	return engine.ReplayOptions{
		Consumer:     c.Name,
		Handler:      c.Handler,
		Sources:      c.Sources,
		EventTypes:   c.EventTypes,
		FromSeq:      sel.FromSeq,
		ToSeq:        sel.ToSeq,
		Since:        sel.Since,
		Until:        sel.Until,
		Type:         sel.Type,
		EventID:      sel.EventID,
		DeadLetters:  sel.DeadLetters,
		DryRun:       sel.DryRun,
		OutOfOrder:   sel.OutOfOrder,
		ApplyTimeout: c.ApplyTimeout,
		Logger:       o.Logger,
	}, nil
}

// Replay re-delivers the selected messages of HOOKS to the consumer
// through its inbox ([Ops.ReplayWith]); report, when set, is called for
// every selected message as it is handled, so callers can stream items
// instead of holding them.
func (o *Ops) Replay(ctx context.Context, name string, sel ReplaySelectors, report func(engine.ReplayItem)) (engine.ReplaySummary, error) {
	res, err := o.ReplayWith(ctx, name, sel, ReplayHooks{Report: report})
	return res.ReplaySummary, err
}

// ReplayHooks follow a running replay.
type ReplayHooks struct {
	// Report is called for every selected message as it is handled.
	Report func(engine.ReplayItem)
	// Planned is called once, before the first message, with how many
	// messages the replay reads at most.
	Planned func(n uint64)
}

// ReplayResult is what a replay did: the outcomes, and the dead letters
// a `--dead-letters` replay left alone because a later event of their
// ordering key had passed them (see [ReplaySelectors.OutOfOrder]).
type ReplayResult struct {
	engine.ReplaySummary
	SkippedPassed []SkippedDeadLetter `json:"skipped_passed"`
}

// ReplayWith plans a replay ([Ops.PlanReplay]) and runs it
// ([Ops.RunReplay]).
func (o *Ops) ReplayWith(ctx context.Context, name string, sel ReplaySelectors, hooks ReplayHooks) (ReplayResult, error) {
	plan, err := o.PlanReplay(name, sel)
	if err != nil {
		return ReplayResult{ReplaySummary: engine.ReplaySummary{Consumer: name, DryRun: sel.DryRun}, SkippedPassed: []SkippedDeadLetter{}},
			fmt.Errorf("replay: %w", err)
	}
	return o.RunReplay(ctx, plan, hooks)
}

// RunReplay re-delivers the plan's messages of HOOKS to its consumer
// through the inbox, calling hooks as it goes. A real `--dead-letters`
// replay without OutOfOrder leaves the dead letters a later event of
// their key has passed alone (ReplayResult.SkippedPassed) and applies the
// others, each narrowed to its own message as a requeue does; a dry run
// reads them all (see [Ops.DryRunNotes]).
func (o *Ops) RunReplay(ctx context.Context, plan *ReplayPlan, hooks ReplayHooks) (ReplayResult, error) {
	sel, opts := plan.sel, plan.opts
	res := ReplayResult{ReplaySummary: engine.ReplaySummary{Consumer: opts.Consumer, DryRun: sel.DryRun}, SkippedPassed: []SkippedDeadLetter{}}
	if o.JS == nil {
		return res, fmt.Errorf("replay: %w", errNoJetStream)
	}
	opts.Report, opts.Planned = hooks.Report, hooks.Planned
	if sel.DeadLetters && !sel.DryRun && !sel.OutOfOrder {
		return o.replayInOrder(ctx, opts, res)
	}
	sum, err := o.runReplay(ctx, opts)
	res.ReplaySummary = sum
	if err != nil {
		return res, fmt.Errorf("replay: %w", err)
	}
	return res, nil
}

// runReplay is the one call of the engine's replay: every replay,
// requeue and in-order dead-letter replay comes through here with options
// [Ops.PlanReplay] built and checked.
func (o *Ops) runReplay(ctx context.Context, opts engine.ReplayOptions) (engine.ReplaySummary, error) {
	return engine.Replay(ctx, o.Pool, o.JS, opts)
}

// Applied reports whether a replay outcome means the event's effect is in
// the database (applied now or before).
func Applied(outcome consumer.Outcome) bool {
	return outcome == consumer.Processed || outcome == consumer.Duplicate
}

// ParseWhen reads a replay time selector: an RFC 3339 time, or a duration
// meaning that long before now ("2h"). Empty is the zero time.
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 2h: %w", s, ErrInvalid)
}
