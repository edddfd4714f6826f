package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"
)

// action is what to tell JetStream about one message after its batch.
type action struct {
	kind  actionKind
	delay time.Duration // for nak
}

type actionKind int

const (
	ack actionKind = iota
	nak
	term
	// hold: not attempted, behind an earlier event of its ordering key
	// that failed (keyed consumption only, see keyed.go).
	hold
	// postpone: the handler postponed it ([consumer.Postpone]); keyed,
	// it is tried again after the key's next event, or after delay;
	// unkeyed, it is nak'd with delay.
	postpone
)

// runner pulls from one durable consumer, groups messages into batches and
// applies them on a bounded pool of workers. It owns every goroutine it
// starts; Run returns only after they have finished.
type runner struct {
	name        string
	js          jetstream.JetStream
	streamName  string
	cfg         jetstream.ConsumerConfig
	concurrency int
	batchSize   int
	batchWait   time.Duration
	// prefetch is how many messages one pull asks for (0: two batches per
	// worker); see consume.
	prefetch int
	log      *slog.Logger
	// process applies a batch and returns one action per message. It runs
	// with a context that is not cancelled by shutdown, so a transaction in
	// flight can still commit and be acked.
	process func(ctx context.Context, msgs []jetstream.Msg) []action
	// hold, when set, is called by the feeder before every Next and blocks
	// while intake should pause (the database is unreachable); nil never
	// pauses.
	hold func(ctx context.Context)
}

// prefetchBytes bounds what one consumer buffers, whatever the bodies'
// size: with 1 MiB bodies, batch 64 and concurrency 4, a count limit alone
// would allow hundreds of MiB. It bounds each pull request and the
// runner's own queue (see feed).
const prefetchBytes = 64 << 20

// minPullWindow is the fewest messages the pull iterator asks for at once.
const minPullWindow = 128

// run creates the durable consumer and consumes until ctx is cancelled.
// A pull iterator that closes while ctx is live (the durable consumer was
// deleted, the server ended it) is replaced by a new one on a re-created
// durable, so a consumer never stops silently while the process runs.
// Errors that retrying cannot fix (a configuration the server refuses)
// are returned.
func (r *runner) run(ctx context.Context) error {
	workers := pool.New().WithMaxGoroutines(r.concurrency)
	defer workers.Wait()
	const firstDelay = 250 * time.Millisecond
	delay := firstDelay
	for ctx.Err() == nil {
		d, err := ensureDurable(ctx, r.js, r.streamName, r.cfg, r.log)
		if err == nil {
			delay = firstDelay
			err = r.consume(ctx, d, workers)
			if err == nil && ctx.Err() == nil {
				err = errors.New("pull iterator closed (durable consumer deleted?)")
			}
		} else if refused(err) {
			return fmt.Errorf("consumer %s: create durable: %w", r.name, err)
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		r.log.Warn("consumer interrupted; re-creating it", "consumer", r.name, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
	return nil
}

// refused reports whether the server rejected the consumer configuration
// itself, which no retry will change.
func refused(err error) bool {
	if errors.Is(err, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 400
}

// consume pulls from cons and hands batches to workers until the pulls
// stop: on shutdown (ctx cancelled, after what was pulled is applied) or
// because the server ended the durable (the error is returned).
//
// A feeder goroutine pulls into the runner's own queue, which holds at
// most prefetch messages (and prefetchBytes of bodies): with the batches
// being applied, one instance holds a bounded number of unacked messages
// (Options.Held). Unbounded, one instance's queue grew to the durable's
// MaxAckPending under a backlog, and when that instance died the others
// got nothing until its messages came back after ack_wait.
//
// The feeder asks for exactly the room the queue has (a fetch: one pull
// request of that many messages and bytes), so what the server sends
// always fits and the feeder never has to leave the connection's buffer
// to fill up. A pull iterator refills its requests by itself and its
// channel holds only as many entries as it requested: a feeder that had
// to wait for room let heartbeats and expiry notices overflow it, and the
// NATS client dropped them or, worse, a message (slow consumer), which
// came back only after ack_wait.
func (r *runner) consume(ctx context.Context, d *durable, workers *pool.Pool) error {
	// The queue holds two batches per worker, enough to hide the pull
	// round trip, and never fewer than minPullWindow.
	prefetch := r.prefetch
	if prefetch <= 0 {
		prefetch = defaultPrefetch(r.concurrency, r.batchSize)
	}
	prefetch = max(prefetch, minPullWindow)
	q := newMsgQueue(prefetch, prefetchBytes)
	stopped := make(chan struct{})
	var (
		bg      sync.WaitGroup
		feedErr error
	)
	bg.Go(func() {
		feedErr = r.feed(ctx, d, q, prefetch)
		q.close() // after feedErr is set: the loop below reads it once the queue is closed
	})
	narrowCtx, stopNarrowing := context.WithCancel(ctx)
	bg.Go(func() { d.watchNarrowing(narrowCtx, r.js, r.streamName, r.log) })
	bg.Go(func() { r.keepQueuedInProgress(q, stopped) })
	defer func() {
		close(stopped)
		stopNarrowing()
		bg.Wait()
	}()

	b := &batcher{r: r, ctx: ctx, applyCtx: context.WithoutCancel(ctx), workers: workers, q: q,
		batch: make([]jetstream.Msg, 0, r.batchSize)}
	b.run()
	// The feeder has returned (it closed the queue): its error is set.
	return feedErr
}

// batcher takes messages off the queue into batches and hands each to a
// worker (see run for when a batch is handed over).
type batcher struct {
	r        *runner
	ctx      context.Context
	applyCtx context.Context // applies outlive shutdown's cancel
	workers  *pool.Pool
	q        *msgQueue
	batch    []jetstream.Msg
	inflight atomic.Int32 // batches handed to workers and not yet acked
}

// flush hands the batch being filled to a worker.
func (b *batcher) flush() {
	if len(b.batch) == 0 {
		return
	}
	msgs := b.batch
	b.batch = make([]jetstream.Msg, 0, b.r.batchSize)
	b.inflight.Add(1)
	// The in-progress acks start now, not when a worker takes the
	// batch: workers.Go waits while every worker is busy, possibly for
	// longer than ack_wait, and the batch is out of the queue (whose
	// in-progress acks no longer cover it) from here on.
	stopProgress := b.r.keepInProgress(msgs)
	// While the database is unreachable no batch starts: it would
	// only fail and be nak'd, and come back for another try while
	// the outage lasts. It waits here, kept by its in-progress acks,
	// until the gate's ping finds the database again (or shutdown).
	if b.r.hold != nil {
		b.r.hold(b.ctx)
	}
	b.workers.Go(func() {
		defer b.q.nudge()
		defer b.inflight.Add(-1)
		b.r.applyAndAck(b.applyCtx, msgs, stopProgress)
	})
}

// run batches the queue's messages until the queue is closed, then hands
// over what is left.
func (b *batcher) run() {
	// A batch waits at most batchWait from its first message: a deadline
	// for the whole batch, not a wait per message, which let a batch take
	// up to batchSize × batchWait to fill at moderate rates.
	//
	// A batch that is not full (the queue ran dry) waits while another
	// batch is being applied, until that one is done, the batch fills, or
	// partialHold has passed since its first message. Full batches use
	// every worker; partial ones are applied one at a time. Without this,
	// at moderate rates each message found an idle worker and went alone
	// or in a batch of a few: four small transactions at once, each paying
	// its round trips and commit for a handful of events, which took more
	// CPU per event than the rate needed and queued everything behind it.
	// With it the events that arrive during one apply make up the next
	// batch, so batches grow with the rate, the way group commit does.
	//
	// waitUntil is the batch's own deadline (batchWait), holdUntil the
	// longer one while another batch is in flight. A nudge (a batch ended)
	// ends only the hold, never the batch's own wait. Only this loop adds
	// to inflight, so while it waits inflight can only fall, and each fall
	// nudges it to look again.
	var waitUntil, holdUntil time.Time
	for {
		var (
			msg jetstream.Msg
			st  popState
		)
		if len(b.batch) == 0 {
			msg, st = b.q.pop(time.Time{})
		} else {
			// Past the deadline pop still hands over what is queued
			// already, without waiting: a batch takes everything that
			// is there (up to batchSize) and never waits past it.
			deadline := waitUntil
			if b.inflight.Load() > 0 && holdUntil.After(deadline) {
				deadline = holdUntil
			}
			msg, st = b.q.pop(deadline)
		}
		if st == popTimedOut || st == popNudged {
			if len(b.batch) == 0 {
				continue
			}
			if now := time.Now(); now.Before(waitUntil) || (b.inflight.Load() > 0 && now.Before(holdUntil)) {
				continue
			}
			b.flush()
			continue
		}
		if st == popClosed {
			break
		}
		b.batch = append(b.batch, msg)
		if len(b.batch) == 1 {
			now := time.Now()
			waitUntil = now.Add(b.r.batchWait)
			holdUntil = now.Add(max(b.r.batchWait, partialHold))
		}
		if len(b.batch) >= b.r.batchSize {
			b.flush()
		}
	}
	b.flush()
}

// partialHold is the longest a batch that is not full waits for another
// batch's apply to end (see consume). It bounds the latency the rule adds
// when an apply is slow; a typical apply ends well before it.
const partialHold = 5 * time.Millisecond

// pullWait is how long one pull waits for messages: an idle consumer asks
// again this often, a lost consumer leader (a NATS node going down) is
// noticed within it, and shutdown waits at most this for the pull in
// flight, whose messages are applied before the runner returns.
const pullWait = time.Second

// minPullBytes is the least byte room a pull asks for: the largest body
// the ingress accepts, with its headers, must fit.
const minPullBytes = 2 << 20

// feed pulls messages into q until ctx ends or the durable is gone. It
// pulls only when q has room for half a window, so one
// pull brings many messages. While the intake gate is closed (the
// database is unreachable) it pulls nothing new: what is queued is still
// handed to workers, and each fails fast and is nak'd with its backoff.
func (r *runner) feed(ctx context.Context, d *durable, q *msgQueue, window int) error {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		if r.hold != nil {
			r.hold(ctx)
		}
		msgs, bytes := q.waitRoom(ctx, max(window/2, 1), minPullBytes)
		if ctx.Err() != nil {
			break
		}
		err := r.fetch(d, q, msgs, bytes)
		switch {
		case err == nil:
			delay = 100 * time.Millisecond
			continue
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("consumer %s: pull: %w", r.name, err)
		}
		r.log.Warn("pull failed", "consumer", r.name, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
	return nil
}

// fetch makes one pull of at most msgs messages and bytes bytes and
// queues what it brings, as it comes.
func (r *runner) fetch(d *durable, q *msgQueue, msgs, bytes int) error {
	batch, err := d.cons.Fetch(msgs, jetstream.FetchMaxWait(pullWait), jetstream.FetchMaxBytes(bytes))
	if err != nil {
		return err
	}
	for m := range batch.Messages() {
		if !d.skip(m, r.log) {
			q.push(m)
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return err
	}
	return nil
}

// keepQueuedInProgress sends in-progress acks for messages that have
// waited in q for a sixth of ack_wait, until stop is closed. The queue can
// hold up to MaxAckPending messages, which a slow handler may take longer
// than ack_wait to reach; without this they would be redelivered while
// still queued.
//
// It looks every half interval, at messages queued for half an interval
// or more: a message then goes at most an interval without one while
// queued, and its batch's own in-progress acks (keepInProgress, started
// when the batch leaves the queue) follow within another interval, well
// inside ack_wait. Looking once an interval at messages queued that long
// let a message wait almost two intervals, and with its batch's first
// in-progress ack an interval later the gap reached ack_wait.
func (r *runner) keepQueuedInProgress(q *msgQueue, stop <-chan struct{}) {
	interval := r.progressInterval() / 2
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for _, m := range q.waitingSince(time.Now().Add(-interval)) {
				_ = m.InProgress() // best effort; a redelivery is still caught by the inbox
			}
		}
	}
}

func (r *runner) progressInterval() time.Duration {
	if interval := r.cfg.AckWait / 3; interval > 0 {
		return interval
	}
	return 10 * time.Second
}

// applyAndAck processes one batch and acks only afterwards. stopProgress
// ends the batch's in-progress acks (keepInProgress), which keep its
// messages from being redelivered while that takes long; it is called
// before the first ack.
func (r *runner) applyAndAck(ctx context.Context, msgs []jetstream.Msg, stopProgress func()) {
	actions := r.processSafely(ctx, msgs, stopProgress)
	for i, msg := range msgs {
		var err error
		switch a := actions[i]; a.kind {
		case ack:
			err = msg.Ack()
		case nak, postpone:
			err = msg.NakWithDelay(a.delay)
		case term:
			err = msg.Term()
		}
		if err != nil {
			// The effect is committed; a lost ack only means a redelivery
			// that the inbox will report as a duplicate.
			r.log.Warn("ack failed", "consumer", r.name, "err", err)
		}
	}
}

// processSafely runs process, then stopProgress, and turns a
// panic (handlers' panics are already caught per event; this is the net
// under the rest) into a delayed redelivery of the whole batch instead of
// a message kept in progress forever and a crashed process.
func (r *runner) processSafely(ctx context.Context, msgs []jetstream.Msg, stopProgress func()) (actions []action) {
	defer stopProgress()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("batch processing panicked; redelivering", "consumer", r.name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			actions = make([]action, len(msgs))
			for i := range actions {
				actions[i] = action{kind: nak, delay: 5 * time.Second}
			}
		}
	}()
	return r.process(ctx, msgs)
}

// keepInProgress sends in-progress acks every third of ack_wait, from the
// moment a batch leaves the queue until it is applied, so neither a wait
// for a free worker nor a slow handler gets it redelivered to another
// worker in the meantime.
func (r *runner) keepInProgress(msgs []jetstream.Msg) (stop func()) {
	return keepInProgress(msgs, r.progressInterval())
}

// keepInProgress sends an in-progress ack for each of msgs every interval
// until stop is called.
func keepInProgress(msgs []jetstream.Msg, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, m := range msgs {
					_ = m.InProgress() // best effort; the apply goes on either way
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}
