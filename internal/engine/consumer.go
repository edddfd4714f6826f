package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// FilterSubjects are the HOOKS subjects the consumer receives.
func (o *Options) FilterSubjects() []string {
	sources := o.Sources
	if len(sources) == 0 {
		sources = []string{"*"}
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range sources {
		for _, t := range o.EventTypes {
			// Two spellings can share a subject ("orders/create" and
			// "orders.create"); JetStream refuses overlapping filters.
			if f := stream.HookFilter(s, t); !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// Consumer applies one durable JetStream consumer's messages to Postgres.
type Consumer struct {
	opts  Options
	pool  *pgxpool.Pool
	r     *runner
	gate  *intakeGate
	apply *applier
	// group runs the keyed messages' partitions (nil: no keyed source).
	group *group
}

// New fills opts' defaults ([Options.WithDefaults]), refuses any option
// out of range ([Options.Validate]) and returns a Consumer; nothing runs
// until [Consumer.Run].
func New(pool *pgxpool.Pool, js jetstream.JetStream, opts Options) (*Consumer, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Consumer{opts: opts, pool: pool, gate: newIntakeGate(opts.Name, pool.Ping, opts.Logger),
		// Every transaction attempt gets the whole handler timeout: when a
		// batch fails and is narrowed down, each part needs its time.
		apply: &applier{pool: pool, consumer: opts.Name, h: opts.Handler, timeout: opts.HandlerTimeout}}
	cfg := jetstream.ConsumerConfig{
		Durable:     opts.Name,
		Description: "hookbridge consumer " + opts.Name,
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     opts.AckWait,
		// The server never gives up on a message by itself: it would drop
		// it without a dead-letter row, and it cannot tell an outage from
		// a bad event. The consumer enforces opts.MaxDeliver instead.
		MaxDeliver:    -1,
		MaxAckPending: opts.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if f := opts.FilterSubjects(); len(f) == 1 {
		cfg.FilterSubject = f[0] // also understood by servers before 2.10
	} else {
		cfg.FilterSubjects = f
	}
	c.r = &runner{
		name:        opts.Name,
		js:          js,
		streamName:  stream.Hooks,
		cfg:         cfg,
		concurrency: opts.Concurrency,
		batchSize:   opts.BatchSize,
		batchWait:   opts.BatchWait,
		prefetch:    opts.Prefetch,
		log:         opts.Logger,
		process:     c.process,
		hold:        c.gate.wait,
	}
	if opts.Partitions > 0 {
		c.group = newGroup(c, js)
	}
	return c, nil
}

// Name is the consumer's name.
func (c *Consumer) Name() string { return c.opts.Name }

// Run pulls and applies messages until ctx is cancelled, then stops taking
// new messages, finishes and acks what is in flight, and returns. A
// consumer with partitions runs its share of them alongside.
func (c *Consumer) Run(ctx context.Context) error {
	if c.group == nil {
		c.group = c.leftoverGroup(ctx)
	}
	if c.group == nil {
		if err := c.runUntilKeyed(ctx); err != nil || ctx.Err() != nil {
			return err
		}
		if c.group = c.leftoverGroup(ctx); c.group == nil {
			return c.r.run(ctx)
		}
	}
	// The first part to fail for good (a configuration the server
	// refuses) stops the other.
	p := pool.New().WithErrors().WithContext(ctx).WithCancelOnError().WithFirstError()
	p.Go(c.group.run)
	p.Go(c.r.run)
	return p.Wait()
}

// leftoverGroup is the group that drains the consumer's partition
// durables when none of its sources has an ordering key any more (it was
// turned off): what they hold was answered 2xx and must still apply, in
// order. They are read for as long as they exist (empty, they cost a pull
// now and then and hold nothing back). They are created when HOOKS holds
// keyed messages of its sources and none exists yet (keyedStored). Nil
// when there are none, or HOOKS cannot be read (the runner's own errors
// will say why).
func (c *Consumer) leftoverGroup(ctx context.Context) *group {
	s, err := c.r.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return nil
	}
	found := false
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		if owner, p := stream.ConsumerOfDurable(name); owner == c.opts.Name && p >= 0 {
			found = true
		}
	}
	if names.Err() != nil || (!found && !c.keyedStored(ctx, s)) {
		return nil
	}
	n, err := stream.PartitionCount(ctx, c.r.js)
	if err != nil || n == 0 {
		return nil
	}
	c.opts.Partitions, c.opts.KeyedSources = n, []string{}
	c.opts.Logger.Info("no source of the consumer has an ordering key, but keyed messages of its sources are stored: its partition durables drain them in order",
		"consumer", c.opts.Name, "partitions", n)
	return newGroup(c, c.r.js)
}

// keyedRecheck is how often a consumer with no keyed source looks for
// keyed messages of its sources: one last-message lookup per source.
const keyedRecheck = 30 * time.Second

// runUntilKeyed runs the consumer's own durable until ctx ends, or until
// HOOKS holds a keyed message of its sources: an instance whose
// configuration still keys a source (a rolling configuration change)
// stored it after this one started, and no durable of this consumer
// reads it. Then it stops the runner (what it pulled is applied and
// acked first) and returns nil, for Run to start the partitions that
// drain those messages in order beside it.
func (c *Consumer) runUntilKeyed(ctx context.Context) error {
	every := c.opts.keyedRecheck
	if every <= 0 {
		every = keyedRecheck
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	found, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			if s, err := c.r.js.Stream(rctx, stream.Hooks); err == nil && c.keyedStored(rctx, s) {
				close(found)
				stop()
				return
			}
		}
	}()
	err := c.r.run(rctx)
	stop()
	<-watched
	select {
	case <-found:
		if ctx.Err() == nil {
			return nil
		}
	default:
	}
	return err
}

// keyedStored reports whether HOOKS holds a keyed message of one of the
// consumer's sources: when a source's key was turned off before the
// consumer ever ran keyed (an ingress-only process accepted them), no
// partition durable exists, yet what they hold was answered 2xx. One
// last-message lookup per source; a type the consumer does not take
// only costs partition durables that find nothing.
func (c *Consumer) keyedStored(ctx context.Context, s jetstream.Stream) bool {
	sources := c.opts.Sources
	if len(sources) == 0 {
		sources = []string{"*"}
	}
	for _, src := range sources {
		_, err := s.GetLastMsgForSubject(ctx, stream.HooksKeyedRoot+".*."+src+".>")
		if err == nil {
			return true
		}
	}
	return false
}

func (c *Consumer) process(ctx context.Context, msgs []jetstream.Msg) []action {
	return c.processWith(ctx, c.apply, msgs)
}

// processWith applies msgs with a and returns what to tell JetStream about
// each: ack, term (dead-lettered), nak with the backoff delay, or hold
// (keyed: not attempted, behind an earlier failed event of its key).
func (c *Consumer) processWith(ctx context.Context, a *applier, msgs []jetstream.Msg) []action {
	actions := make([]action, len(msgs))
	evs := make([]consumer.Event, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	for i, m := range msgs {
		ev, err := EventFromMsg(m)
		if err != nil {
			actions[i] = c.deadLetter(ctx, ev, ReasonUnusable, err)
			continue
		}
		evs = append(evs, ev)
		idx = append(idx, i)
	}
	if len(evs) == 0 {
		return actions
	}
	// Only the apply's transactions are bounded by HandlerTimeout (each
	// attempt, see batch.go): what happens after a failure (failure count,
	// dead-letter row) gets its own time, or an event that ran out of time
	// could never be dead-lettered.
	start := time.Now()
	results, elapsed := c.applyTraced(ctx, a, evs, start)
	passed := passedInBatch(evs, results)
	for j, res := range results {
		ev := evs[j]
		i := idx[j]
		attrs := []any{"consumer", c.opts.Name, "source", ev.Source, "event_id", ev.ID, "type", ev.Type,
			"seq", ev.StreamSeq, "delivery", ev.NumDelivered, "outcome", res.Outcome.String(), "duration", elapsed}
		switch {
		case res.Outcome == consumer.Failed && isHeld(res.Err):
			actions[i] = action{kind: hold}
		case res.Outcome == consumer.Failed && consumer.IsPostponed(res.Err):
			actions[i] = c.onPostponed(ctx, ev, res.Err, passed[j], attrs)
		case res.Outcome != consumer.Failed:
			actions[i] = action{kind: ack}
			// One line per event at info would cost more than applying it
			// at high rates; the outcome metrics count them instead. An
			// event that failed before says it recovered, at info, so a
			// "will retry" warning always has its end in the log.
			switch {
			case res.Outcome == consumer.Conflict:
				c.opts.Logger.Warn("event applied", attrs...)
			case res.Outcome == consumer.Processed && ev.NumDelivered > 1:
				c.opts.Logger.Info("event applied after retrying", "consumer", c.opts.Name, "source", ev.Source, "event_id", ev.ID,
					"type", ev.Type, "seq", ev.StreamSeq, "attempts", ev.NumDelivered, "since_received", time.Since(ev.ReceivedAt).Round(time.Millisecond))
			default:
				c.opts.Logger.Debug("event applied", attrs...)
			}
		default:
			actions[i] = c.onFailure(ctx, ev, res.Err, attrs)
		}
	}
	return actions
}

// applyTraced applies evs between the tracer's Start and End. A panic
// outside the handlers (theirs are caught per event) still ends the step,
// every event failed, before it goes on to the runner, which redelivers
// the batch: a tracer's span is never left open.
func (c *Consumer) applyTraced(ctx context.Context, a *applier, evs []consumer.Event, start time.Time) (results []consumer.Result, elapsed time.Duration) {
	tctx := c.traceApplyStart(ctx, evs)
	ended := false
	defer func() {
		if !ended {
			c.traceApplyEnd(tctx, make([]consumer.Result, len(evs)), time.Since(start)) // the zero Result is Failed
		}
	}()
	results = a.apply(tctx, evs)
	elapsed = time.Since(start)
	ended = true
	c.traceApplyEnd(tctx, results, elapsed)
	return results, elapsed
}

// backoff is the nak delay after the delivery-th failed delivery.
func (c *Consumer) backoff(delivery uint64) time.Duration {
	b := c.opts.Backoff
	if delivery == 0 {
		delivery = 1
	}
	if int(delivery) > len(b) {
		return b[len(b)-1]
	}
	return b[delivery-1]
}
