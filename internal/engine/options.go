package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Options configure a [Consumer]. Zero values take the documented defaults
// ([Options.WithDefaults]); a value out of range is refused, naming the
// option ([Options.Validate]), never replaced by a default.
type Options struct {
	// Name is the durable consumer name and the inbox's consumer key.
	Name string
	// Sources limits the consumer to these sources; empty means all.
	Sources []string
	// EventTypes are the event types to receive (required).
	EventTypes []string
	// Handler applies each event (required).
	Handler consumer.Handler

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
	// key first), since it last failed, before it is dead-lettered
	// (default [DefaultPostponeLimit]).
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

// defaultBackoff is the redelivery delay schedule after failures when
// Options.Backoff is empty.
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

// WithDefaults is o with every option it leaves at zero given the value
// [New] runs with. Values out of range stay as they are, for
// [Options.Validate] to refuse. `hookbridge config check` prints a
// consumer's settings through it, so that what it prints is what serve
// runs with. BatchWait's default, [DefaultBatchWait], is its zero.
func (o Options) WithDefaults() Options {
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.AckWait == 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	if o.Prefetch == 0 && o.Concurrency > 0 && o.BatchSize > 0 {
		o.Prefetch = defaultPrefetch(o.Concurrency, o.BatchSize)
	}
	if o.MaxAckPending == 0 {
		// Room for three instances' holdings: a member that dies (or
		// hangs) keeps its share until AckWait, and the others go on
		// with theirs in the meantime.
		o.MaxAckPending = max(1000, 3*o.Held())
	}
	if o.HandlerTimeout == 0 {
		o.HandlerTimeout = DefaultHandlerTimeout
	}
	if len(o.Backoff) == 0 {
		o.Backoff = defaultBackoff
	}
	if o.PostponeLimit == 0 {
		o.PostponeLimit = DefaultPostponeLimit
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// OptionError is an option [New] refuses: which one (the field's name in
// [Options]) and why.
type OptionError struct {
	Consumer string // Options.Name
	Option   string // "BatchWait"
	Reason   string // "-1s must not be negative"
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("consumer %s: %s: %s", e.Consumer, e.Option, e.Reason)
}

// Validate reports every option of o (given [Options.WithDefaults]) that
// [New] refuses, each as an [*OptionError], joined.
func (o Options) Validate() error {
	var errs []error
	bad := func(option, format string, args ...any) {
		errs = append(errs, &OptionError{Consumer: o.Name, Option: option, Reason: fmt.Sprintf(format, args...)})
	}
	if !stream.ValidName(o.Name) {
		bad("Name", "%q must be letters, digits, '-' or '_'", o.Name)
	}
	if len(o.EventTypes) == 0 {
		bad("EventTypes", "none: the consumer would receive nothing")
	}
	for _, t := range o.EventTypes {
		// The provider's own spelling ("orders/create", "deploy:staging"):
		// FilterSubjects maps it to subject tokens the way the ingress does.
		if !stream.ValidTypeSpelling(t) {
			bad("EventTypes", "%q must be 1-%d bytes", t, stream.MaxEventTypeBytes)
		}
	}
	for _, s := range o.Sources {
		if !stream.ValidName(s) {
			bad("Sources", "%q is not a valid source name", s)
		}
	}
	if o.Handler == nil {
		bad("Handler", "none")
	}
	o.validateTuning(bad)
	if o.Partitions < 0 || o.Partitions > stream.MaxPartitions {
		bad("Partitions", "%d must be between 0 and %d", o.Partitions, stream.MaxPartitions)
	}
	return errors.Join(errs...)
}

// validateTuning checks how the consumer batches, acknowledges and gives
// up: no negative value (but MaxDeliver's, which retries forever), and a
// batch wait the in-progress acks cover.
func (o Options) validateTuning(bad func(option, format string, args ...any)) {
	if o.Concurrency < 0 {
		bad("Concurrency", "%d must not be negative (0: the default, %d)", o.Concurrency, DefaultConcurrency)
	}
	if o.BatchSize < 0 || o.BatchSize > MaxBatch {
		bad("BatchSize", "%d must be between 1 and %d (0: the default, %d)", o.BatchSize, MaxBatch, DefaultBatchSize)
	}
	switch {
	case o.BatchWait < 0:
		bad("BatchWait", "%s must not be negative", o.BatchWait)
	case o.AckWait > 0 && o.BatchWait >= o.AckWait/3:
		// A batch being filled sends no in-progress acks: waiting this
		// long would get its first messages redelivered.
		bad("BatchWait", "%s must be shorter than a third of the ack wait (%s)", o.BatchWait, o.AckWait)
	}
	for _, d := range []struct {
		option string
		value  time.Duration
	}{{"AckWait", o.AckWait}, {"HandlerTimeout", o.HandlerTimeout}, {"PostponeLimit", o.PostponeLimit}} {
		if d.value < 0 {
			bad(d.option, "%s must not be negative", d.value)
		}
	}
	if o.Prefetch < 0 {
		bad("Prefetch", "%d must not be negative", o.Prefetch)
	}
	if o.MaxAckPending < 0 {
		bad("MaxAckPending", "%d must not be negative", o.MaxAckPending)
	}
}

// Options are the options the consumer runs with: those given to [New],
// with [Options.WithDefaults] applied.
func (c *Consumer) Options() Options { return c.opts }

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
