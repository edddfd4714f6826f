package ops

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hookbridge/hookbridge/consumer"
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
}

// ReplayOptions resolves the consumer's handler and subscription, as
// serve does, and combines them with the selectors.
func (o *Ops) ReplayOptions(name string, sel ReplaySelectors) (consumer.ReplayOptions, error) {
	c, err := o.Consumer(name)
	if err != nil {
		return consumer.ReplayOptions{}, err
	}
	switch {
	case sel.ToSeq > 0 && sel.FromSeq > sel.ToSeq:
		return consumer.ReplayOptions{}, fmt.Errorf("from-seq %d is after to-seq %d: %w", sel.FromSeq, sel.ToSeq, ErrInvalid)
	case !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Since.Before(sel.Until):
		return consumer.ReplayOptions{}, fmt.Errorf("since is not before until: %w", ErrInvalid)
	case sel.Type != "" && !sel.DeadLetters && !slices.Contains(c.EventTypes, sel.Type):
		return consumer.ReplayOptions{}, fmt.Errorf("consumer %s does not receive event type %q: %w", c.Name, sel.Type, ErrInvalid)
	}
	return consumer.ReplayOptions{
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
		ApplyTimeout: c.ApplyTimeout,
		Logger:       o.Logger,
	}, nil
}

// Replay re-delivers the selected messages of HOOKS to the consumer
// through its inbox ([consumer.Replay]); report, when set, is called for
// every selected message as it is handled, so callers can stream items
// instead of holding them.
func (o *Ops) Replay(ctx context.Context, name string, sel ReplaySelectors, report func(consumer.ReplayItem)) (consumer.ReplaySummary, error) {
	if o.JS == nil {
		return consumer.ReplaySummary{}, fmt.Errorf("replay: %w", errNoJetStream)
	}
	opts, err := o.ReplayOptions(name, sel)
	if err != nil {
		return consumer.ReplaySummary{}, fmt.Errorf("replay: %w", err)
	}
	opts.Report = report
	sum, err := consumer.Replay(ctx, o.Pool, o.JS, opts)
	if err != nil {
		return sum, fmt.Errorf("replay: %w", err)
	}
	return sum, nil
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
