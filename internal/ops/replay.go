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
func (o *Ops) Replay(ctx context.Context, name string, sel ReplaySelectors, report func(ReplayItem)) (ReplayResult, error) {
	return o.ReplayWith(ctx, name, sel, ReplayHooks{Report: report})
}

// ReplayHooks follow a running replay.
type ReplayHooks struct {
	// Report is called for every selected message as it is handled.
	Report func(ReplayItem)
	// Planned is called once, before the first message, with how many
	// messages the replay reads at most.
	Planned func(n uint64)
}

// ReplayItem is one message of a replay as every view prints it: a line
// of `hookbridge replay --json` and an item of the admin API's dry run.
// In a dry run a message that is one of the consumer's unresolved dead
// letters names it (DeadLetterID) and says what the real run does with
// it (Note; PassedBy and Skipped for one a later event of its ordering
// key has passed): the inbox alone calls it new.
type ReplayItem struct {
	StreamSeq uint64    `json:"stream_seq"`
	Time      time.Time `json:"time"`
	Source    string    `json:"source"`
	EventID   string    `json:"event_id"`
	EventType string    `json:"event_type"`
	// Outcome is what applying did or, in a dry run, would do.
	Outcome  consumer.Outcome `json:"outcome"`
	Error    string           `json:"error,omitempty"`
	Resolved bool             `json:"resolved,omitempty"` // a dead letter was marked resolved
	*DryRunNote
}

// ReplayResult is what a replay did or, a dry run, would do, as every
// view prints it: the summary line of `hookbridge replay --json`, and the
// summary of the admin API's dry run and of its replay jobs. Selected
// counts the messages read, the outcomes each what became of them;
// ByType counts them per event type. In a dry run NewDeadLetters counts
// the new ones that are unresolved dead letters (passed ones aside: the
// real run applies them again, and they fail again unless their cause
// was fixed) and PassedDeadLetters those a later event of their ordering
// key has passed. SkippedPassed are the dead letters a `--dead-letters`
// replay left alone because such an event had passed them (see
// [ReplaySelectors.OutOfOrder]).
type ReplayResult struct {
	engine.ReplaySummary
	ByType            map[string]int      `json:"by_type"`
	NewDeadLetters    int                 `json:"new_dead_letters"`
	PassedDeadLetters int                 `json:"passed_dead_letters"`
	SkippedPassed     []SkippedDeadLetter `json:"skipped_passed"`
}

func newReplayResult(name string, dryRun bool) ReplayResult {
	return ReplayResult{ReplaySummary: engine.ReplaySummary{Consumer: name, DryRun: dryRun}, ByType: map[string]int{},
		SkippedPassed: []SkippedDeadLetter{}}
}

// item is it as the views print it, counted in r's tallies; notes, in a
// dry run, says which messages are dead letters.
func (r *ReplayResult) item(it engine.ReplayItem, notes func(engine.ReplayItem) *DryRunNote) ReplayItem {
	out := ReplayItem{StreamSeq: it.Seq, Time: it.Time.UTC(), Source: it.Source, EventID: it.EventID, EventType: it.Type,
		Outcome: it.Outcome, Error: it.Error, Resolved: it.Resolved}
	r.ByType[it.Type]++
	if notes == nil {
		return out
	}
	out.DryRunNote = notes(it)
	switch {
	case out.DryRunNote == nil:
	case out.PassedBy != nil:
		r.PassedDeadLetters++
	case it.Outcome == consumer.ReplayNew:
		r.NewDeadLetters++
	}
	return out
}

// ReplayWith plans a replay ([Ops.PlanReplay]) and runs it
// ([Ops.RunReplay]).
func (o *Ops) ReplayWith(ctx context.Context, name string, sel ReplaySelectors, hooks ReplayHooks) (ReplayResult, error) {
	plan, err := o.PlanReplay(name, sel)
	if err != nil {
		return newReplayResult(name, sel.DryRun), fmt.Errorf("replay: %w", err)
	}
	return o.RunReplay(ctx, plan, hooks)
}

// RunReplay re-delivers the plan's messages of HOOKS to its consumer
// through the inbox, calling hooks as it goes. A real `--dead-letters`
// replay without OutOfOrder leaves the dead letters a later event of
// their key has passed alone (ReplayResult.SkippedPassed) and applies the
// others, each narrowed to its own message as a requeue does; a dry run
// reads them all and says what the real run does with each.
func (o *Ops) RunReplay(ctx context.Context, plan *ReplayPlan, hooks ReplayHooks) (ReplayResult, error) {
	sel, opts := plan.sel, plan.opts
	res := newReplayResult(opts.Consumer, sel.DryRun)
	if o.JS == nil {
		return res, fmt.Errorf("replay: %w", errNoJetStream)
	}
	var notes func(engine.ReplayItem) *DryRunNote
	if sel.DryRun {
		var err error
		if notes, err = o.dryRunNotes(ctx, opts.Consumer, sel); err != nil {
			return res, fmt.Errorf("replay: %w", err)
		}
	}
	opts.Planned = hooks.Planned
	opts.Report = func(it engine.ReplayItem) {
		item := res.item(it, notes)
		if hooks.Report != nil {
			hooks.Report(item)
		}
	}
	if sel.DeadLetters && !sel.DryRun && !sel.OutOfOrder {
		err := o.replayInOrder(ctx, opts, &res)
		return res, err
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
