package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// ReplayOptions select the messages [Replay] re-delivers to a consumer.
// The selectors combine: every given one must match.
type ReplayOptions struct {
	// Consumer is the inbox key the events are applied under (required).
	Consumer string
	// Handler applies the events; not needed for a dry run.
	Handler consumer.Handler
	// Sources and EventTypes are the consumer's own subscription; a range
	// replay reads only those subjects. EventTypes is required unless
	// DeadLetters is set.
	Sources    []string
	EventTypes []string

	FromSeq, ToSeq uint64    // stream sequences, inclusive; 0 = open
	Since, Until   time.Time // stream timestamps; Until is exclusive
	Type           string    // only this event type
	EventID        string    // only this event id
	// DeadLetters replays the consumer's unresolved dead letters, read
	// from the stream by their sequences, instead of a range.
	DeadLetters bool
	// DryRun reads the inbox to report what would happen; it writes
	// nothing.
	DryRun bool
	// Resolution is what the dead letters the replay applied are marked
	// with (default [ResolutionReplayed]).
	Resolution string
	// OutOfOrder applies a dead letter that a later event of its ordering
	// key has passed (it applied after the dead letter was recorded):
	// applying it now applies it after that event. Without it such a dead
	// letter is held, checked under its row's lock in the apply's own
	// transaction.
	OutOfOrder bool

	// ApplyTimeout bounds one event's transaction (default
	// [DefaultHandlerTimeout], as for a running consumer).
	ApplyTimeout time.Duration
	// Report, when set, is called for every selected message.
	Report func(ReplayItem)
	// Planned, when set, is called once before the first message with
	// how many messages the replay reads at most (the unresolved dead
	// letters, or the messages on the consumer's subjects from the start
	// on), so a caller can show progress.
	Planned func(n uint64)
	Logger  *slog.Logger
}

// ReplayItem is what happened to one replayed message.
type ReplayItem struct {
	Seq      uint64           `json:"seq"`
	Time     time.Time        `json:"time"`
	Source   string           `json:"source"`
	EventID  string           `json:"event_id"`
	Type     string           `json:"type"`
	Outcome  consumer.Outcome `json:"outcome"`
	Error    string           `json:"error,omitempty"`
	Resolved bool             `json:"resolved,omitempty"` // a dead letter was marked resolved
}

// ReplaySummary counts the outcomes of a replay.
type ReplaySummary struct {
	Consumer  string `json:"consumer"`
	DryRun    bool   `json:"dry_run"`
	Selected  int    `json:"selected"` // messages that matched the selectors
	Processed int    `json:"processed"`
	Duplicate int    `json:"duplicate"`
	Conflict  int    `json:"conflict"`
	Failed    int    `json:"failed"`
	New       int    `json:"new"` // dry run: would be processed
	Missing   int    `json:"missing"`
	Mismatch  int    `json:"mismatch"`
	Unusable  int    `json:"unusable"`
	// Held were not applied, to keep their key's order: an earlier event
	// of their key failed or is not applied yet, or (a dead letter) a
	// later one has passed them.
	Held     int `json:"held"`
	Resolved int `json:"resolved"` // dead letters marked resolved
}

func (s *ReplaySummary) add(it ReplayItem) {
	s.Selected++
	switch it.Outcome {
	case consumer.Processed:
		s.Processed++
	case consumer.Duplicate:
		s.Duplicate++
	case consumer.Conflict:
		s.Conflict++
	case consumer.ReplayNew:
		s.New++
	case consumer.ReplayMissing:
		s.Missing++
	case consumer.ReplayMismatch:
		s.Mismatch++
	case consumer.ReplayUnusable:
		s.Unusable++
	case consumer.ReplayHeld:
		s.Held++
	default:
		s.Failed++
	}
	if it.Resolved {
		s.Resolved++
	}
}

// Replay re-delivers messages of the HOOKS stream to a consumer's apply
// path: the same [Apply] with the consumer's handler, so the inbox turns
// every event applied before into a duplicate and applies each other one
// once. Messages are read from JetStream itself (an ordered consumer over
// the consumer's subjects, or GetMsg by sequence for dead letters), never
// from a copy in Postgres. Dead letters of the consumer whose event
// applied (processed or duplicate) are marked resolved.
//
// It stops at the stream's last message as of the start. A failed event
// is counted and reported, and the replay goes on; the error is only for
// failures to read the stream or the database as a whole.
func Replay(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, o ReplayOptions) (ReplaySummary, error) {
	r, err := newReplayer(pool, o)
	r.js = js
	if err != nil {
		return r.sum, err
	}
	s, err := js.Stream(ctx, stream.Hooks)
	if err != nil {
		return r.sum, fmt.Errorf("replay %s: stream %s: %w", o.Consumer, stream.Hooks, err)
	}
	if o.DeadLetters {
		err = r.deadLetters(ctx, s)
	} else {
		err = r.streamRange(ctx, js, s)
	}
	r.log.Info("replay finished", "consumer", o.Consumer, "dry_run", o.DryRun, "selected", r.sum.Selected,
		"processed", r.sum.Processed, "duplicate", r.sum.Duplicate, "conflict", r.sum.Conflict,
		"failed", r.sum.Failed, "held", r.sum.Held, "new", r.sum.New, "missing", r.sum.Missing,
		"mismatch", r.sum.Mismatch, "unusable", r.sum.Unusable, "resolved", r.sum.Resolved)
	return r.sum, err
}

type replayer struct {
	pool *pgxpool.Pool
	js   jetstream.JetStream
	o    ReplayOptions
	log  *slog.Logger
	sum  ReplaySummary
	// unresolved holds the stream sequences of the consumer's unresolved
	// dead letters, so a range replay resolves them without a query per
	// message.
	unresolved map[uint64]bool
	// order keeps the keyed events in order (replay_order.go).
	order *keyOrder
}

func newReplayer(pool *pgxpool.Pool, o ReplayOptions) (*replayer, error) {
	r := &replayer{pool: pool, o: o, log: o.Logger, sum: ReplaySummary{Consumer: o.Consumer, DryRun: o.DryRun}}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.o.ApplyTimeout <= 0 {
		r.o.ApplyTimeout = DefaultHandlerTimeout
	}
	if r.o.Resolution == "" {
		r.o.Resolution = ResolutionReplayed
	}
	// The selectors are checked once, by the operator actions that build
	// o from what an operator asked; here only what the engine needs to
	// run at all.
	switch {
	case !stream.ValidName(o.Consumer):
		return r, fmt.Errorf("replay: consumer name %q is not valid", o.Consumer)
	case o.Handler == nil && !o.DryRun:
		return r, fmt.Errorf("replay %s: no handler", o.Consumer)
	case !o.DeadLetters && len(o.EventTypes) == 0:
		return r, fmt.Errorf("replay %s: no event types", o.Consumer)
	}
	return r, nil
}

// deadLetters replays the consumer's unresolved dead letters that match
// the selectors, each read back from the stream by its sequence.
func (r *replayer) deadLetters(ctx context.Context, s jetstream.Stream) error {
	dls, err := ListDeadLetters(ctx, r.pool, DeadLetterFilter{
		Consumer: r.o.Consumer, UnresolvedOnly: true, EventType: r.o.Type, EventID: r.o.EventID,
		FromSeq: r.o.FromSeq, ToSeq: r.o.ToSeq,
	})
	if err != nil {
		return fmt.Errorf("replay %s: %w", r.o.Consumer, err)
	}
	r.unresolved = map[uint64]bool{}
	var last uint64
	for _, d := range dls {
		r.unresolved[d.StreamSeq] = true
		last = max(last, d.StreamSeq)
	}
	if r.order, err = newKeyOrder(ctx, r.pool, r.js, r.o, last); err != nil {
		return err
	}
	r.planned(uint64(len(dls)))
	for _, d := range dls {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := s.GetMsg(ctx, d.StreamSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			r.report(ReplayItem{Seq: d.StreamSeq, Source: d.Source, EventID: d.EventID, Type: d.EventType, Outcome: consumer.ReplayMissing}, nil)
			continue
		}
		if err != nil {
			return fmt.Errorf("replay %s: read seq %d: %w", r.o.Consumer, d.StreamSeq, err)
		}
		if !r.inTimeRange(raw.Time) {
			continue
		}
		ev, evErr := EventFromParts(MsgParts{Subject: raw.Subject, Header: raw.Header, Data: raw.Data, StreamSeq: raw.Sequence, NumDelivered: 1, StoredAt: raw.Time})
		if evErr == nil && (ev.Source != d.Source || ev.ID != d.EventID) {
			mismatch := fmt.Errorf("dead letter is %s/%s", d.Source, d.EventID)
			r.report(ReplayItem{Seq: d.StreamSeq, Time: raw.Time, Source: ev.Source, EventID: ev.ID, Type: ev.Type, Outcome: consumer.ReplayMismatch,
				Error: mismatch.Error()}, mismatch)
			continue
		}
		r.handle(ctx, ev, evErr, raw.Time)
	}
	return nil
}

// streamRange reads the consumer's subjects from the stream with an
// ordered consumer, from the start sequence or time up to the stream's
// last message at the start (or the end selectors).
func (r *replayer) streamRange(ctx context.Context, js jetstream.JetStream, s jetstream.Stream) error {
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("replay %s: stream info: %w", r.o.Consumer, err)
	}
	last := info.State.LastSeq
	if r.o.ToSeq > 0 && r.o.ToSeq < last {
		last = r.o.ToSeq
	}
	if last == 0 || r.o.FromSeq > last {
		return nil
	}
	if err := r.loadUnresolved(ctx); err != nil {
		return err
	}
	if r.order, err = newKeyOrder(ctx, r.pool, js, r.o, last); err != nil {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, stream.Hooks, r.orderedConfig())
	if err != nil {
		return fmt.Errorf("replay %s: ordered consumer: %w", r.o.Consumer, err)
	}
	if ci := cons.CachedInfo(); ci != nil {
		defer r.deleteConsumer(js, ci.Name)
		r.planned(min(ci.NumPending, last-max(r.o.FromSeq, 1)+1))
		if ci.NumPending == 0 {
			return nil
		}
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("replay %s: read stream: %w", r.o.Consumer, err)
	}
	defer it.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("replay %s: read stream: %w", r.o.Consumer, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("replay %s: message metadata: %w", r.o.Consumer, err)
		}
		if md.Sequence.Stream > last || (!r.o.Until.IsZero() && !md.Timestamp.Before(r.o.Until)) {
			return nil
		}
		if r.inTimeRange(md.Timestamp) {
			ev, evErr := EventFromMsg(msg)
			if r.o.EventID == "" || ev.ID == r.o.EventID {
				r.handle(ctx, ev, evErr, md.Timestamp)
			}
		}
		if md.Sequence.Stream == last || md.NumPending == 0 {
			return nil
		}
	}
}

func (r *replayer) orderedConfig() jetstream.OrderedConsumerConfig {
	types := r.o.EventTypes
	if r.o.Type != "" {
		types = []string{r.o.Type}
	}
	subjects := (&Options{Sources: r.o.Sources, EventTypes: types}).ReplaySubjects()
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    subjects,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
		// A name of its own: an ordered consumer numbers its consumers from
		// 1, and the last replay's could still answer.
		NamePrefix: "hookbridge_replay_" + r.o.Consumer + "_" + nuid.Next(),
	}
	switch {
	case r.o.FromSeq > 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = r.o.FromSeq
	case !r.o.Since.IsZero():
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		since := r.o.Since
		cfg.OptStartTime = &since
	}
	return cfg
}

// deleteConsumer removes the replay's ephemeral consumer at once rather
// than leaving it to the inactivity threshold.
func (r *replayer) deleteConsumer(js jetstream.JetStream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream.Hooks, name) // best effort: it expires anyway
}

func (r *replayer) loadUnresolved(ctx context.Context) error {
	if r.o.DryRun {
		return nil
	}
	dls, err := ListDeadLetters(ctx, r.pool, DeadLetterFilter{Consumer: r.o.Consumer, UnresolvedOnly: true,
		FromSeq: r.o.FromSeq, ToSeq: r.o.ToSeq})
	if err != nil {
		return fmt.Errorf("replay %s: %w", r.o.Consumer, err)
	}
	r.unresolved = map[uint64]bool{}
	for _, d := range dls {
		r.unresolved[d.StreamSeq] = true
	}
	return nil
}

func (r *replayer) inTimeRange(t time.Time) bool {
	return (r.o.Since.IsZero() || !t.Before(r.o.Since)) && (r.o.Until.IsZero() || t.Before(r.o.Until))
}

// handle applies (or, in a dry run, classifies) one selected event.
func (r *replayer) handle(ctx context.Context, ev consumer.Event, evErr error, at time.Time) {
	it := ReplayItem{Seq: ev.StreamSeq, Time: at, Source: ev.Source, EventID: ev.ID, Type: ev.Type}
	var cause error // it.Error's error, for the log line
	if evErr == nil {
		if why := r.order.blocked(ctx, ev); why != "" {
			it.Outcome, it.Error = consumer.ReplayHeld, why
			r.report(it, nil)
			return
		}
	}
	switch {
	case evErr != nil:
		cause = evErr
		it.Outcome, it.Error = consumer.ReplayUnusable, ShortError(evErr.Error())
	case r.o.DryRun:
		out, err := peekInbox(ctx, r.pool, r.o.Consumer, ev)
		it.Outcome = out
		if err == nil && out == consumer.ReplayNew {
			var why string
			if why, err = r.failingLive(ctx, ev); why != "" {
				// New to the inbox, but the real run's apply meets what
				// the live consumer meets: unless it applies then, its
				// key's later events are held.
				it.Error = why
				r.order.failing(ev)
				r.report(it, nil)
				return
			}
		}
		if err != nil {
			cause = err
			it.Outcome, it.Error = consumer.Failed, ShortError(err.Error())
		}
	default:
		report, err := r.apply(ctx, ev, &it)
		if !report {
			return
		}
		cause = err
	}
	if it.Outcome != consumer.ReplayHeld { // a passed dead letter lets its key go on
		r.order.done(ev, it.Outcome)
	}
	r.report(it, cause)
}

// apply applies ev and, when it is one of the consumer's unresolved dead
// letters, resolves that row in the same transaction (applyResolving). It
// reports false when the event was left alone and is not to be reported:
// a dead-letter replay found its row resolved meanwhile (discarded by an
// operator, or applied by another requeue or replay). The error is the
// one it.Error holds, if any, for the log line.
func (r *replayer) apply(ctx context.Context, ev consumer.Event, it *ReplayItem) (report bool, cause error) {
	dead := r.unresolved[ev.StreamSeq]
	var out consumer.Outcome
	var err error
	if dead {
		var resolved, gone bool
		out, err = r.withRetry(ctx, func(actx context.Context) (consumer.Outcome, error) {
			var o consumer.Outcome
			var e error
			o, resolved, gone, e = applyResolving(actx, r.pool, r.o.Consumer, r.o.Handler, ev, r.o.Resolution, r.o.OutOfOrder)
			return o, e
		})
		switch {
		case err == nil && out == consumer.ReplayHeld:
			it.Outcome, it.Error = consumer.ReplayHeld, ErrPassed.Error()
			return true, nil
		case err == nil && gone:
			delete(r.unresolved, ev.StreamSeq)
			if r.o.DeadLetters {
				return false, nil
			}
			// A range replay applies every message of its range, as it
			// would had the row been resolved before it started.
			dead = false
			out, err = r.applyPlain(ctx, ev)
		case err == nil:
			it.Resolved = resolved
			if resolved {
				delete(r.unresolved, ev.StreamSeq)
			}
		}
	} else {
		out, err = r.applyPlain(ctx, ev)
	}
	it.Outcome = out
	if err != nil {
		it.Error = ShortError(err.Error())
		if dead {
			if nerr := noteReplayFailure(ctx, r.pool, r.o.Consumer, ev, err); nerr != nil {
				r.log.Warn("replay failure not noted on its dead letter", "seq", ev.StreamSeq, "err", errtext.ForLog(nerr))
			}
		}
	}
	return true, err
}

// applyPlain applies ev with [Apply].
func (r *replayer) applyPlain(ctx context.Context, ev consumer.Event) (consumer.Outcome, error) {
	return r.withRetry(ctx, func(actx context.Context) (consumer.Outcome, error) {
		return Apply(actx, r.pool, r.o.Consumer, r.o.Handler, ev)
	})
}

// withRetry runs one apply attempt under the apply timeout, trying again a
// few times when the database fails transiently, so a short blip does not
// fail an operator's replay.
func (r *replayer) withRetry(ctx context.Context, attempt func(ctx context.Context) (consumer.Outcome, error)) (consumer.Outcome, error) {
	delay := 200 * time.Millisecond
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, r.o.ApplyTimeout)
		out, err := attempt(actx)
		cancel()
		if err == nil || !IsTransient(err) || n == 3 {
			return out, err
		}
		select {
		case <-ctx.Done():
			return consumer.Failed, err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// ErrPassed is why a dead letter is held: a later event of its ordering
// key applied after it was dead-lettered.
var ErrPassed = errors.New("a later event of its ordering key has applied since it was dead-lettered; applying it now would apply it out of order")

// applyResolving applies ev for consumer and marks its unresolved dead
// letter resolved in one transaction, which first locks that row. A dead
// letter a later event of its key has passed is held (ReplayHeld, nothing
// applied) unless outOfOrder: the mark is read under the lock, and the
// later event writes it in its own transaction, so the two never race. So the
// effect and the resolution commit together or not at all, and whoever
// else touches the row waits: a discard then finds it resolved (and an
// event an operator discarded is never applied by a requeue that raced
// it), a second requeue finds nothing to lock and applies nothing. gone
// reports that the row was resolved already; nothing was applied then. A
// conflict is recorded and the row stays unresolved; a failure rolls
// everything back.
func applyResolving(ctx context.Context, pool *pgxpool.Pool, consumerName string, h consumer.Handler, ev consumer.Event, resolution string, outOfOrder bool) (out consumer.Outcome, resolved, gone bool, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return consumer.Failed, false, false, fmt.Errorf("apply %s/%s: %w: %w", ev.Source, ev.ID, errBeginFailed, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	locked, passed, err := store.DeadLetterLock(ctx, tx, consumerName, messageKey(&ev))
	if err != nil {
		return consumer.Failed, false, false, fmt.Errorf("apply %s/%s: lock dead letter seq %d: %w", ev.Source, ev.ID, ev.StreamSeq, err)
	}
	if !locked {
		return consumer.Failed, false, true, nil
	}
	if passed && !outOfOrder {
		return consumer.ReplayHeld, false, false, nil
	}
	out, _, err = applyInTx(ctx, tx, consumerName, h, ev)
	if err != nil {
		return consumer.Failed, false, false, err
	}
	if out == consumer.Processed || out == consumer.Duplicate {
		if resolved, err = store.DeadLetterResolve(ctx, tx, consumerName, messageKey(&ev), resolution); err != nil {
			return consumer.Failed, false, false, fmt.Errorf("resolve dead letter %s seq %d: %w", consumerName, ev.StreamSeq, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return consumer.Failed, false, false, fmt.Errorf("apply %s/%s: commit: %w", ev.Source, ev.ID, err)
	}
	return out, resolved, false, nil
}

func (r *replayer) planned(n uint64) {
	if r.o.Planned != nil {
		r.o.Planned(n)
	}
}

// report counts and reports it. The log line carries cause with
// Postgres's quoted values masked (errtext.ForLog); it.Error, for the
// operator's report, keeps the whole message.
func (r *replayer) report(it ReplayItem, cause error) {
	r.sum.add(it)
	r.log.Debug("replayed", "consumer", r.o.Consumer, "seq", it.Seq, "source", it.Source, "event_id", it.EventID,
		"type", it.Type, "outcome", it.Outcome, "err", errtext.ForLog(cause))
	if r.o.Report != nil {
		r.o.Report(it)
	}
}

// failingLive says, for a keyed event of a keyed replay, whether the live
// consumer is failing it right now or has postponed it (it has a row in
// hookbridge.delivery_failures), and how; "" when it is neither.
func (r *replayer) failingLive(ctx context.Context, ev consumer.Event) (string, error) {
	if r.order == nil || ev.OrderingKey == "" {
		return "", nil
	}
	fs, err := store.FailureListForEvent(ctx, r.pool, []string{r.o.Consumer}, ev.Source, ev.ID)
	if err != nil {
		return "", fmt.Errorf("read the failures of %s/%s: %w", ev.Source, ev.ID, err)
	}
	for _, f := range fs {
		if f.StreamSeq != ev.StreamSeq {
			continue
		}
		if f.PostponedSince != nil { // its last attempt postponed
			return fmt.Sprintf("the live consumer has it postponed since %s (it waits for a later event of its ordering key): "+
				"the real run tries it again and, unless it applies, holds its key's later events",
				f.PostponedSince.UTC().Format(time.RFC3339)), nil
		}
		return ShortError(fmt.Sprintf("the live consumer is failing it (%d failures, the last: %s): "+
			"the real run applies it again and, unless it applies, holds its key's later events", f.Failures, f.LastError)), nil
	}
	return "", nil
}

// peekInbox tells what applying ev would do, reading the inbox only.
func peekInbox(ctx context.Context, pool *pgxpool.Pool, consumerName string, ev consumer.Event) (consumer.Outcome, error) {
	stored, err := store.InboxGetHash(ctx, pool, consumerName, ev.Source, ev.ID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return consumer.ReplayNew, nil
	case err != nil:
		return consumer.Failed, fmt.Errorf("read inbox %s/%s: %w", ev.Source, ev.ID, err)
	case string(stored) == string(ev.BodySHA256[:]):
		return consumer.Duplicate, nil
	default:
		return consumer.Conflict, nil
	}
}
