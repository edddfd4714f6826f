package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	log         *slog.Logger
	// process applies a batch and returns one action per message. It runs
	// with a context that is not cancelled by shutdown, so a transaction in
	// flight can still commit and be acked.
	process func(ctx context.Context, msgs []jetstream.Msg) []action
	// hold, when set, is called before every pull and blocks while intake
	// should pause (the database is unreachable); nil never pauses.
	hold func(ctx context.Context)
}

func (r *runner) run(ctx context.Context) error {
	cons, err := r.js.CreateOrUpdateConsumer(ctx, r.streamName, r.cfg)
	if err != nil {
		return fmt.Errorf("consumer %s: create durable: %w", r.name, err)
	}
	// Keep at most two batches per worker buffered: enough to hide the pull
	// round trip, few enough that none sits in the buffer close to ack_wait.
	prefetch := 2 * r.concurrency * r.batchSize
	// A short pull expiry makes a lost consumer leader (a NATS node going
	// down) noticed within seconds instead of the default 30s.
	it, err := cons.Messages(jetstream.PullMaxMessages(prefetch), jetstream.PullExpiry(5*time.Second))
	if err != nil {
		return fmt.Errorf("consumer %s: pull: %w", r.name, err)
	}
	stopped := make(chan struct{})
	go func() { // stops intake on shutdown; exits with run
		select {
		case <-ctx.Done():
			// Drain: no new pulls; what is already buffered is still
			// returned by Next and applied below, then Next reports closed.
			it.Drain()
		case <-stopped:
		}
	}()
	defer close(stopped)

	workers := pool.New().WithMaxGoroutines(r.concurrency)
	applyCtx := context.WithoutCancel(ctx)
	batch := make([]jetstream.Msg, 0, r.batchSize)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		msgs := batch
		batch = make([]jetstream.Msg, 0, r.batchSize)
		workers.Go(func() { r.applyAndAck(applyCtx, msgs) })
	}
	// A batch waits at most batchWait from its first message: a deadline
	// for the whole batch, not a wait per message, which let a batch take
	// up to batchSize × batchWait to fill at moderate rates.
	var deadline time.Time
	for {
		if r.hold != nil {
			r.hold(ctx)
		}
		var msg jetstream.Msg
		if len(batch) == 0 {
			msg, err = it.Next()
		} else if wait := time.Until(deadline); wait > 0 {
			msg, err = it.Next(jetstream.NextMaxWait(wait))
		} else {
			flush()
			continue
		}
		if err != nil {
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
				flush()
				continue
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				break
			}
			// Transient pull errors (server restart, leadership change):
			// the iterator keeps retrying by itself.
			r.log.Warn("pull failed", "consumer", r.name, "err", err)
			flush()
			continue
		}
		batch = append(batch, msg)
		if len(batch) == 1 {
			deadline = time.Now().Add(r.batchWait)
		}
		if len(batch) >= r.batchSize {
			flush()
		}
	}
	flush()
	workers.Wait()
	return nil
}

// applyAndAck processes one batch, keeps its messages from being
// redelivered while that takes long, and acks only afterwards.
func (r *runner) applyAndAck(ctx context.Context, msgs []jetstream.Msg) {
	stopProgress := r.keepInProgress(msgs)
	actions := r.process(ctx, msgs)
	stopProgress()
	for i, msg := range msgs {
		var err error
		switch a := actions[i]; a.kind {
		case ack:
			err = msg.Ack()
		case nak:
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

// keepInProgress sends in-progress acks every third of ack_wait while a
// batch is being applied, so a slow handler is not redelivered to another
// worker in the meantime.
func (r *runner) keepInProgress(msgs []jetstream.Msg) (stop func()) {
	interval := r.cfg.AckWait / 3
	if interval <= 0 {
		interval = 10 * time.Second
	}
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
