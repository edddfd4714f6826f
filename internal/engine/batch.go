package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/store"
)

// MaxBatch caps the events applied in one transaction. The set-wise path
// (setwise.go) opens no savepoints, so Postgres's 64-subtransaction cache
// does not bound it; what does is the transaction itself: it holds its
// inbox rows locked until it commits, sends its arrays in one message, and
// a failure anywhere in it re-applies the rest. Past a few hundred events
// a batch gains nothing measurable (docs/PERFORMANCE.md).
const MaxBatch = 1024

// DefaultBatchSize is the batch size when the options give none, chosen
// from the measurements in docs/PERFORMANCE.md.
const DefaultBatchSize = 256

// DefaultBatchWait is the batch wait when the options give none: none. A
// batch takes every message already queued (up to the batch size) and
// goes, like a group commit: at a low rate events are applied as they
// come, under load the queue fills while the workers are busy and the
// next batch is large. Measured against 1ms in docs/PERFORMANCE.md: the
// same or better throughput (1.14× in two pairs of runs) and a lower p50
// at 250 events/s (3.6–3.9 ms against 4.7–5.3 ms).
const DefaultBatchWait time.Duration = 0

// maxSavepointBatch caps the batches the savepoint path applies: each
// event there is a subtransaction, and Postgres caches 64 per backend;
// past that every snapshot has to consult pg_subtrans and throughput
// collapses.
const maxSavepointBatch = 64

// ErrBatchAborted marks the results of events that were not applied
// because the database failed the transaction they shared (connection
// lost, serialization failure, the database hung): which event, if any,
// was at fault is unknown, and retrying them one by one against a failing
// database would only hold them longer. The consumer naks them all.
var ErrBatchAborted = errors.New("batch transaction aborted")

// ApplyBatch applies evs, in stream order, with the outcomes and effects
// that [Apply] called on each event in turn would give, and as few
// transactions as it can: all of them set-wise in one transaction with a
// constant number of round trips (setwise.go). If that transaction fails,
// it narrows down to the culprit: the part before it and the part after
// it are applied set-wise again, the culprit alone, so only the culprit
// fails. When the database itself fails (a transient error, or a
// time-out after which it does not answer a ping), the events not yet
// applied fail with [ErrBatchAborted] at once. len(evs) must be at most
// [MaxBatch].
func ApplyBatch(ctx context.Context, pool *pgxpool.Pool, consumerName string, h consumer.Handler, evs []consumer.Event) []consumer.Result {
	a := &applier{pool: pool, consumer: consumerName, h: h}
	return a.apply(ctx, evs)
}

// applier applies the batches of one consumer.
type applier struct {
	pool     *pgxpool.Pool
	consumer string
	h        consumer.Handler
	// timeout bounds each transaction attempt (the handler timeout);
	// zero leaves it to ctx.
	timeout time.Duration
	// keyed keeps each ordering key's order when a batch is narrowed
	// down: once an event fails, the later events of its key are not
	// applied but held ([errHeld]), so none commits before it. An event
	// its handler postponed holds all but the key's next event
	// ([keyHolds]).
	keyed bool
}

// errHeld is the error of an event that was not attempted because an
// earlier event of its ordering key in the same batch failed: it must not
// apply before that one. It is not the event's failure and never counts
// toward max_deliver.
var errHeld = errors.New("held behind an earlier event of its ordering key")

// isHeld reports whether a result's error says the event was held behind
// an earlier event of its key.
func isHeld(err error) bool { return errors.Is(err, errHeld) }

func (a *applier) apply(ctx context.Context, evs []consumer.Event) []consumer.Result {
	results := make([]consumer.Result, len(evs))
	if len(evs) > MaxBatch {
		err := fmt.Errorf("apply batch: %d events exceed the maximum of %d", len(evs), MaxBatch)
		for i := range results {
			results[i] = consumer.Result{Outcome: consumer.Failed, Err: err}
		}
		return results
	}
	evs, idx, err := a.withoutDeadLettered(ctx, evs, results)
	if err != nil {
		failAll(evs, results, err)
		return results
	}
	if len(idx) == 0 {
		a.narrow(ctx, evs, results)
		return results
	}
	if len(evs) == 0 {
		return results
	}
	rest := make([]consumer.Result, len(evs))
	a.narrow(ctx, evs, rest)
	for j, i := range idx {
		results[i] = rest[j]
	}
	return results
}

// withoutDeadLettered settles the redelivered keyed events that already
// have an unresolved dead letter: their Term was lost, or a member cut off
// from NATS dead-lettered them while another got them back. Applying one
// would apply it after later events of its key, which went on past its
// dead letter. It returns the other events and, when it removed any,
// their indexes in evs. First deliveries have no dead letter and cost no
// query, nor do unkeyed events: a redelivered one is judged by its
// handler again, and under a storm of failures (every event redelivered)
// a second round trip per batch would be one more step to fail.
func (a *applier) withoutDeadLettered(ctx context.Context, evs []consumer.Event, results []consumer.Result) ([]consumer.Event, []int, error) {
	if !a.keyed {
		return evs, nil, nil
	}
	var redelivered []store.MessageKey
	for _, ev := range evs {
		if ev.NumDelivered > 1 {
			redelivered = append(redelivered, store.MessageKey{Source: ev.Source, EventID: ev.ID, StreamSeq: ev.StreamSeq})
		}
	}
	if len(redelivered) == 0 {
		return evs, nil, nil
	}
	qctx, cancel := a.attempt(ctx)
	dead, err := store.DeadLetterFindUnresolved(qctx, a.pool, a.consumer, redelivered)
	cancel()
	if err != nil {
		return evs, nil, fmt.Errorf("apply batch: %w: look up dead letters: %w", errBeginFailed, err)
	}
	if len(dead) == 0 {
		return evs, nil, nil
	}
	var rest []consumer.Event
	var idx []int
	for i, ev := range evs {
		if dead[ev.StreamSeq] {
			results[i] = consumer.Result{Outcome: consumer.Duplicate}
			continue
		}
		rest, idx = append(rest, ev), append(idx, i)
	}
	return rest, idx, nil
}

// attempt bounds one transaction attempt.
func (a *applier) attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout > 0 {
		return context.WithTimeout(ctx, a.timeout)
	}
	return context.WithCancel(ctx)
}

// one applies a single event in its own transaction, exactly as [Apply].
func (a *applier) one(ctx context.Context, ev consumer.Event) consumer.Result {
	ctx, cancel := a.attempt(ctx)
	defer cancel()
	out, err := Apply(ctx, a.pool, a.consumer, a.h, ev)
	return consumer.Result{Outcome: out, Err: err}
}

// narrow fills results for evs and returns a non-nil error when the
// database failed and nothing after evs should be tried either.
func (a *applier) narrow(ctx context.Context, evs []consumer.Event, results []consumer.Result) error {
	if len(evs) == 1 {
		results[0] = a.one(ctx, evs[0])
		if a.stops(ctx, results[0].Err) {
			return results[0].Err
		}
		return nil
	}
	f := a.setwise(ctx, evs, results)
	if f == nil {
		return nil
	}
	if a.outage(ctx, f.err, f.located(len(evs))) {
		cause := f.err
		if !IsTransient(cause) {
			cause = fmt.Errorf("%w: %w", errUnreachable, cause)
		}
		failAll(evs, results, cause)
		return cause
	}
	if a.keyed {
		return a.narrowParts(ctx, evs, results, split(len(evs), f))
	}
	if !f.located(len(evs)) && len(evs) <= maxSavepointBatch {
		// Culprit unknown, batch small: one pass with a savepoint per
		// event is cheaper than halving when several events fail.
		return a.savepoints(ctx, evs, results)
	}
	for _, p := range split(len(evs), f) {
		if err := a.narrow(ctx, evs[p[0]:p[1]], results[p[0]:p[1]]); err != nil {
			failAll(evs[p[1]:], results[p[1]:], err)
			return err
		}
	}
	return nil
}

// narrowParts applies the parts of evs in turn, for a keyed applier: an
// event whose key an earlier part holds ([keyHolds]) is held, not
// applied, and the rest of its part is narrowed down on its own. (The
// savepoint path is not used: its pipeline sends every event before any
// result is known.)
func (a *applier) narrowParts(ctx context.Context, evs []consumer.Event, results []consumer.Result, parts [][2]int) error {
	for _, p := range parts {
		holds := keyHolds(evs[:p[0]], results[:p[0]])
		part, res := evs[p[0]:p[1]], results[p[0]:p[1]]
		var keep []int
		for i, ev := range part {
			k := orderKey(ev.Source, ev.OrderingKey)
			switch holds[k] {
			case holdAll:
				res[i] = consumer.Result{Outcome: consumer.Failed, Err: fmt.Errorf("apply %s/%s: %w", ev.Source, ev.ID, errHeld)}
				continue
			case holdAfterNext:
				holds[k] = holdAll // this one is the next: the rest of the key waits
			}
			keep = append(keep, i)
		}
		var err error
		if len(keep) == len(part) {
			err = a.narrow(ctx, part, res)
		} else if len(keep) > 0 {
			sub, subRes := make([]consumer.Event, len(keep)), make([]consumer.Result, len(keep))
			for j, i := range keep {
				sub[j] = part[i]
			}
			err = a.narrow(ctx, sub, subRes)
			for j, i := range keep {
				res[i] = subRes[j]
			}
		}
		if err != nil {
			failAll(evs[p[1]:], results[p[1]:], err)
			return err
		}
	}
	return nil
}

// keyHold is what a later part of a batch may try of an ordering key.
type keyHold int

const (
	holdNone keyHold = iota
	// holdAfterNext: an event of the key was postponed and none applied
	// since; the key's next event is tried (it may be what the postponed
	// one waits for), the rest is held.
	holdAfterNext
	// holdAll: an event of the key failed or was held, or one applied
	// after a postponement: the postponed one is tried again first (by
	// the scheduler, in its next batch), so nothing else of the key goes.
	holdAll
)

// keyHolds are the holds of the ordering keys (within their sources,
// [orderKey]) of evs, from their results, in batch order. A postponed
// event is not a failure of its key: its handler says it needs a later
// event of the key first, so holding every later event behind it would
// hold what it waits for (a chain sent in reverse, each event needing the
// one after it, would never apply). But it is tried again right after
// each later event that applies, before the next one (keyed.go), so only
// the key's next event goes before that.
func keyHolds(evs []consumer.Event, results []consumer.Result) map[string]keyHold {
	holds := map[string]keyHold{}
	for i, r := range results {
		k := orderKey(evs[i].Source, evs[i].OrderingKey)
		switch {
		case r.Outcome == consumer.Failed && !consumer.IsPostponed(r.Err):
			holds[k] = holdAll
		case r.Outcome == consumer.Failed:
			if holds[k] != holdAll {
				holds[k] = holdAfterNext
			}
		case holds[k] == holdAfterNext:
			holds[k] = holdAll
		}
	}
	return holds
}

// split decides how to narrow down a failed batch of n events: around the
// culprit when the failure locates it (the part before it, the culprit,
// the part after it), else into halves.
func split(n int, f *setFailure) [][2]int {
	if !f.located(n) {
		return [][2]int{{0, n / 2}, {n / 2, n}}
	}
	var parts [][2]int
	for _, p := range [][2]int{{0, f.lo}, {f.lo, f.hi}, {f.hi, n}} {
		if p[0] < p[1] {
			parts = append(parts, p)
		}
	}
	return parts
}

// savepoints applies evs with a savepoint per event (batch_pipeline.go);
// a lost transaction there falls back to one event per transaction.
func (a *applier) savepoints(ctx context.Context, evs []consumer.Event, results []consumer.Result) error {
	actx, cancel := a.attempt(ctx)
	cause := applyBatchPipelined(actx, a.pool, a.consumer, a.h, evs, results)
	cancel()
	if cause == nil {
		return nil
	}
	if a.outage(ctx, cause, false) {
		if !IsTransient(cause) {
			cause = fmt.Errorf("%w: %w", errUnreachable, cause)
		}
		failAll(evs, results, cause)
		return cause
	}
	for i, ev := range evs {
		results[i] = a.one(ctx, ev)
		if a.stops(ctx, results[i].Err) {
			failAll(evs[i+1:], results[i+1:], results[i].Err)
			return results[i].Err
		}
	}
	return nil
}

// outage reports whether a failed batch transaction was the database's
// doing. A time-out is decided by a ping: it also closes the connection
// (so the error looks like a lost connection) when the culprit is merely
// a slow event. So is a transient error that the handler's failure
// located on one event or run (located): a deadlock or serialization
// failure of one event's own statements says nothing about the others,
// which the per-event path would apply; only a database that does not
// answer fails them all.
func (a *applier) outage(ctx context.Context, cause error, located bool) bool {
	switch {
	case errors.Is(cause, errBeginFailed), errors.Is(cause, errUnreachable):
		return true
	case timedOut(cause):
		return !a.answers(ctx)
	case IsTransient(cause):
		return !located || !a.answers(ctx)
	default:
		return false
	}
}

// stops reports whether the failure of one event applied alone means the
// database is down, so that nothing after it should be tried: a
// transient failure after which the database does not answer. One that
// it answers after (a deadlock, a killed backend) fails that event only.
func (a *applier) stops(ctx context.Context, err error) bool {
	return IsTransient(err) && a.outage(ctx, err, true)
}

// timedOut reports whether err is a deadline or cancellation, the way a
// hung database shows itself (and a slow handler too).
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// answers pings the database, for no longer than one attempt (at most
// 5s), to tell a hung database from a slow event.
func (a *applier) answers(ctx context.Context) bool {
	d := 5 * time.Second
	if a.timeout > 0 {
		d = min(a.timeout, d)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return a.pool.Ping(ctx) == nil
}

// failAll fails evs as not applied because the database failed.
func failAll(evs []consumer.Event, results []consumer.Result, cause error) {
	for i, ev := range evs {
		results[i] = consumer.Result{Outcome: consumer.Failed, Err: fmt.Errorf("apply %s/%s: %w: %w", ev.Source, ev.ID, ErrBatchAborted, cause)}
	}
}
