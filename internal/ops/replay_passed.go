package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// replayInOrder runs a `--dead-letters` replay that leaves alone the dead
// letters a later event of their ordering key has passed: the replay is
// split into sequence ranges between them, each a dead-letter replay of
// its own, so the consumer's replay never reads a passed one. It adds
// to res.
func (o *Ops) replayInOrder(ctx context.Context, opts engine.ReplayOptions, res *ReplayResult) error {
	dls, err := engine.ListDeadLetters(ctx, o.Pool, engine.DeadLetterFilter{
		Consumer: opts.Consumer, UnresolvedOnly: true, EventType: opts.Type, EventID: opts.EventID,
		FromSeq: opts.FromSeq, ToSeq: opts.ToSeq,
	})
	if err != nil {
		return fmt.Errorf("replay %s: %w", opts.Consumer, err)
	}
	var passed, keep []DeadLetter
	for _, d := range dls {
		if Passed(d) != nil {
			passed = append(passed, d)
		} else {
			keep = append(keep, d)
		}
	}
	if len(passed) == 0 {
		sum, err := o.runReplay(ctx, opts)
		res.ReplaySummary = sum
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		return nil
	}
	if res.SkippedPassed, err = o.skippedInTime(ctx, opts, passed); err != nil {
		return err
	}
	if opts.Planned != nil {
		opts.Planned(uint64(len(keep)))
	}
	for _, part := range aroundPassed(opts, passed, keep) {
		if err := ctx.Err(); err != nil {
			return err
		}
		sum, err := o.runReplay(ctx, part)
		addSummary(&res.ReplaySummary, sum)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	o.logger().Info("replay left dead letters alone: a later event of their ordering key has applied",
		"consumer", opts.Consumer, "skipped", len(res.SkippedPassed), "dead_letter_ids", skippedIDs(res.SkippedPassed))
	return nil
}

// aroundPassed splits opts into dead-letter replays over the sequence
// ranges between the passed dead letters' sequences, keeping only ranges
// that hold one of keep. A kept dead letter at the very sequence of a
// passed one (a sequence reused after HOOKS was recreated) gets a replay
// narrowed to its event id, unless the passed one has that id too: then
// the two cannot be told apart by the selectors and it waits for an
// explicit --out-of-order.
func aroundPassed(opts engine.ReplayOptions, passed, keep []DeadLetter) []engine.ReplayOptions {
	cut := map[uint64][]string{} // passed sequences -> their event ids
	for _, d := range passed {
		cut[d.StreamSeq] = append(cut[d.StreamSeq], d.EventID)
	}
	seqs := make([]uint64, 0, len(cut))
	for s := range cut {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	var out []engine.ReplayOptions
	part := func(from, to uint64, eventID string) {
		p := opts
		p.FromSeq, p.ToSeq, p.Planned = from, to, nil
		if eventID != "" {
			p.EventID = eventID
		}
		out = append(out, p)
	}
	holds := func(from, to uint64) bool { // to 0: open
		return slices.ContainsFunc(keep, func(d DeadLetter) bool {
			return d.StreamSeq >= from && (to == 0 || d.StreamSeq <= to)
		})
	}
	from := max(opts.FromSeq, 1)
	for _, s := range seqs {
		if s > from && holds(from, s-1) {
			part(from, s-1, "")
		}
		from = s + 1
	}
	if (opts.ToSeq == 0 || from <= opts.ToSeq) && holds(from, opts.ToSeq) {
		part(from, opts.ToSeq, "")
	}
	for _, d := range keep {
		if ids, ok := cut[d.StreamSeq]; ok && !slices.Contains(ids, d.EventID) {
			part(d.StreamSeq, d.StreamSeq, d.EventID)
		}
	}
	return out
}

// skippedInTime lists the passed dead letters the replay would have read:
// with a time selector, those whose message's stream time is in range (a
// message that has left HOOKS is listed too: it is not applied either).
func (o *Ops) skippedInTime(ctx context.Context, opts engine.ReplayOptions, passed []DeadLetter) ([]SkippedDeadLetter, error) {
	out := make([]SkippedDeadLetter, 0, len(passed))
	var hooks jetstream.Stream
	for _, d := range passed {
		if !opts.Since.IsZero() || !opts.Until.IsZero() {
			if hooks == nil {
				s, err := o.JS.Stream(ctx, stream.Hooks)
				if err != nil {
					return nil, fmt.Errorf("replay %s: stream %s: %w", opts.Consumer, stream.Hooks, err)
				}
				hooks = s
			}
			raw, err := hooks.GetMsg(ctx, d.StreamSeq)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				return nil, fmt.Errorf("replay %s: read seq %d: %w", opts.Consumer, d.StreamSeq, err)
			case (!opts.Since.IsZero() && raw.Time.Before(opts.Since)) || (!opts.Until.IsZero() && !raw.Time.Before(opts.Until)):
				continue
			}
		}
		out = append(out, SkippedDeadLetter{ID: d.ID, Source: d.Source, EventID: d.EventID, EventType: d.EventType,
			StreamSeq: d.StreamSeq, PassedBy: *Passed(d)})
	}
	return out, nil
}

// addSummary adds the counts of b to a.
func addSummary(a *engine.ReplaySummary, b engine.ReplaySummary) {
	a.Selected += b.Selected
	a.Processed += b.Processed
	a.Duplicate += b.Duplicate
	a.Conflict += b.Conflict
	a.Failed += b.Failed
	a.New += b.New
	a.Missing += b.Missing
	a.Mismatch += b.Mismatch
	a.Unusable += b.Unusable
	a.Held += b.Held
	a.Resolved += b.Resolved
}

func skippedIDs(s []SkippedDeadLetter) []int64 {
	out := make([]int64, 0, len(s))
	for _, d := range s {
		out = append(out, d.ID)
	}
	return out
}

func (o *Ops) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}
