package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// Options configure a [Consumer]. Zero values take the documented defaults.
type Options struct {
	// Name is the durable consumer name and the inbox's consumer key.
	Name string
	// Sources limits the consumer to these sources; empty means all.
	Sources []string
	// EventTypes are the event types to receive (required).
	EventTypes []string
	// Handler applies each event (required).
	Handler Handler

	// Concurrency is how many batches are applied at once (default 4).
	Concurrency int
	// BatchSize is how many events share one transaction (default
	// [DefaultBatchSize], at most [MaxBatch]). 1 applies every event in a
	// transaction of its own.
	BatchSize int
	// BatchWait is how long a batch waits, from its first message, for
	// more messages to arrive (default [DefaultBatchWait]: not at all; a
	// batch always takes what is queued already). Under load it hardly matters:
	// while every worker is busy the buffer fills, and the next batch
	// takes what is there at once.
	BatchWait time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering
	// (default 30s). Long applies send in-progress acks.
	AckWait time.Duration
	// MaxDeliver is how many failed applies dead-letter the message
	// (default [DefaultMaxDeliver]; negative: retry forever). Only
	// failures that are not [IsTransient] count, in a counter kept in
	// hookbridge.delivery_failures: redeliveries after deadlocks, lost
	// connections, outages or ack timeouts never do; see retry.go.
	MaxDeliver int
	// Prefetch is how many messages one pull asks for (default 2 ×
	// Concurrency × BatchSize, at least 128): enough to hide the pull
	// round trip. Pulled messages are taken off the connection at once
	// into the consumer's own queue, which holds at most Prefetch of them
	// (and 64 MiB of bodies); messages waiting in it get in-progress acks
	// every AckWait/3. So one instance holds at most [Options.Held]
	// unacked messages.
	Prefetch int
	// MaxAckPending caps unacked messages in flight across every instance
	// (default: three instances' worth of [Options.Held], at least 1000).
	// It must stay well above what one instance holds: the messages a
	// member held when it died come back only after AckWait, and until
	// then they count against this cap for everyone.
	MaxAckPending int
	// HandlerTimeout bounds one batch's transaction (default 30s).
	HandlerTimeout time.Duration
	// Backoff lists the delays before redelivery after a failure, indexed
	// by the delivery count; the last one repeats. Default 1s, 2s, 5s, 10s,
	// 30s, 1m.
	Backoff []time.Duration
	// PostponeLimit is how long an event may wait after its handler first
	// postponed it ([consumer.Postpone]: it needs a later event of its
	// key first) before it is dead-lettered (default
	// [DefaultPostponeLimit]).
	PostponeLimit time.Duration

	Logger *slog.Logger
	// Tracer, when set, observes each applied batch and each dead letter
	// (metrics, tracing); see observe.go.
	Tracer Tracer

	// Partitions is the number of partitions of HOOKS's keyed messages
	// ([stream.PartitionCount]) when one of the consumer's sources has an
	// ordering key; 0 when none has. With partitions the consumer also
	// reads its sources' keyed messages, through a durable per partition
	// ("<name>~pNN"), spread over the instances that run it, and applies
	// the events of one key in stream order (docs/DESIGN.md, "Order").
	Partitions int
	// KeyedSources are the consumer's sources that have an ordering key
	// (nil: every source it reads). When the partitions start, they wait
	// for these sources' messages published unkeyed before (an upgrade to
	// a key), and only for those: another source's unkeyed backlog, or
	// one that fails for ever, never holds the keyed ones.
	KeyedSources []string

	// maxForeignScan bounds what a takeover reads (0: maxForeignScan);
	// tests lower it.
	maxForeignScan int
	// keyedRecheck is how often a consumer with no keyed source looks for
	// keyed messages of its sources (0: keyedRecheck); tests lower it.
	keyedRecheck time.Duration
}

// DefaultBackoff is the redelivery delay schedule after failures.
var defaultBackoff = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}

// DefaultAckWait is how long JetStream waits for an ack before it
// redelivers, unless Options.AckWait says otherwise.
const DefaultAckWait = 30 * time.Second

// DefaultHandlerTimeout bounds one apply's transaction when
// Options.HandlerTimeout (or a replay's ApplyTimeout) is unset.
const DefaultHandlerTimeout = 30 * time.Second

// DefaultPostponeLimit is how long a postponed event may wait for a later
// event of its key, unless Options.PostponeLimit says otherwise: long
// enough for senders that retry a failed delivery for a while (the later
// event may be the earlier one's retry), short enough that a postponement
// that will never succeed shows up as a dead letter the same day.
const DefaultPostponeLimit = time.Hour

// DefaultConcurrency is how many batches a consumer applies at once when
// the options name no number.
const DefaultConcurrency = 4

func (o *Options) setDefaults() error {
	if !stream.ValidName(o.Name) {
		return fmt.Errorf("consumer name %q: use letters, digits, '-' and '_'", o.Name)
	}
	if len(o.EventTypes) == 0 {
		return fmt.Errorf("consumer %s: no event types", o.Name)
	}
	for _, t := range o.EventTypes {
		// The provider's own spelling ("orders/create", "deploy:staging"):
		// FilterSubjects maps it to subject tokens the way the ingress does.
		if !stream.ValidTypeSpelling(t) {
			return fmt.Errorf("consumer %s: event type %q must be 1-%d bytes", o.Name, t, stream.MaxEventTypeBytes)
		}
	}
	for _, s := range o.Sources {
		if !stream.ValidName(s) {
			return fmt.Errorf("consumer %s: source %q is not a valid name", o.Name, s)
		}
	}
	if o.Handler == nil {
		return fmt.Errorf("consumer %s: no handler", o.Name)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchSize > MaxBatch {
		return fmt.Errorf("consumer %s: batch size %d exceeds %d", o.Name, o.BatchSize, MaxBatch)
	}
	if o.BatchWait < 0 {
		o.BatchWait = DefaultBatchWait
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	if o.Prefetch <= 0 {
		o.Prefetch = defaultPrefetch(o.Concurrency, o.BatchSize)
	}
	if o.MaxAckPending <= 0 {
		// Room for three instances' holdings: a member that dies (or
		// hangs) keeps its share until AckWait, and the others go on
		// with theirs in the meantime.
		o.MaxAckPending = max(1000, 3*o.Held())
	}
	if o.HandlerTimeout <= 0 {
		o.HandlerTimeout = DefaultHandlerTimeout
	}
	if len(o.Backoff) == 0 {
		o.Backoff = defaultBackoff
	}
	if o.PostponeLimit <= 0 {
		o.PostponeLimit = DefaultPostponeLimit
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Partitions < 0 || o.Partitions > stream.MaxPartitions {
		return fmt.Errorf("consumer %s: partitions %d out of 0-%d", o.Name, o.Partitions, stream.MaxPartitions)
	}
	return nil
}

// defaultPrefetch is what one pull asks for when Prefetch is unset: two
// batches per worker, so that the next batches wait while these apply.
func defaultPrefetch(concurrency, batchSize int) int {
	return 2 * concurrency * batchSize
}

// Held is the most unacked messages one instance of the consumer holds at
// once: what its pull iterator has asked for, its queue, and the batches
// being applied.
func (o *Options) Held() int {
	prefetch := max(o.Prefetch, minPullWindow)
	return 2*prefetch + o.Concurrency*o.BatchSize
}

// takesType reports whether eventType is one of the consumer's event
// types, in any spelling with the same subject form ("orders/create" for
// "orders.create").
func (o *Options) takesType(eventType string) bool {
	subj := stream.TypeSubject(eventType)
	for _, t := range o.EventTypes {
		if t == eventType || stream.TypeSubject(t) == subj {
			return true
		}
	}
	return false
}

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

// New validates opts and returns a Consumer; nothing runs until [Consumer.Run].
func New(pool *pgxpool.Pool, js jetstream.JetStream, opts Options) (*Consumer, error) {
	if err := opts.setDefaults(); err != nil {
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
	evs := make([]Event, 0, len(msgs))
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
	for j, res := range results {
		ev := evs[j]
		i := idx[j]
		attrs := []any{"consumer", c.opts.Name, "source", ev.Source, "event_id", ev.ID, "type", ev.Type,
			"seq", ev.StreamSeq, "delivery", ev.NumDelivered, "outcome", res.Outcome.String(), "duration", elapsed}
		switch {
		case res.Outcome == Failed && isHeld(res.Err):
			actions[i] = action{kind: hold}
		case res.Outcome == Failed && isPostponed(res.Err):
			actions[i] = c.onPostponed(ctx, ev, res.Err, attrs)
		case res.Outcome != Failed:
			actions[i] = action{kind: ack}
			// One line per event at info would cost more than applying it
			// at high rates; the outcome metrics count them instead. An
			// event that failed before says it recovered, at info, so a
			// "will retry" warning always has its end in the log.
			switch {
			case res.Outcome == Conflict:
				c.opts.Logger.Warn("event applied", attrs...)
			case res.Outcome == Processed && ev.NumDelivered > 1:
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
func (c *Consumer) applyTraced(ctx context.Context, a *applier, evs []Event, start time.Time) (results []Result, elapsed time.Duration) {
	tctx := c.traceApplyStart(ctx, evs)
	ended := false
	defer func() {
		if !ended {
			c.traceApplyEnd(tctx, make([]Result, len(evs)), time.Since(start)) // the zero Result is Failed
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
