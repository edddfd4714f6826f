package app

import (
	"slices"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Resolved is cfg with every setting it leaves to a default given the
// value serve runs with, for `hookbridge config check`. The values come
// from where serve's parts take them: the consumers' options through
// [engine.Options.WithDefaults], the streams' from the stream
// configurations serve creates, the inbox retention from
// [Config.InboxRetentionOrDefault], the others from the defaults the
// ingress, the verifiers and the relay document. A key added to Config
// is printed as configured; one with a default needs a line here.
func (c Config) Resolved(handlers Handlers) (Config, error) {
	r := c
	retention := c.InboxRetentionOrDefault()
	r.InboxRetention = &retention
	if r.MaxInFlight == 0 {
		r.MaxInFlight = bridge.DefaultMaxInFlight
	}
	r.Streams = resolvedStreams(c.Streams)
	if c.NATSURL == "" {
		// With nats_url the external server's own setting applies.
		r.EmbeddedNATS.SyncInterval = c.EmbeddedNATS.SyncInterval.OrDefault()
	}
	r.Relay = resolvedRelay(c.Relay)
	r.Sources = make([]SourceConfig, len(c.Sources))
	for i, s := range c.Sources {
		r.Sources[i] = s.resolved()
	}
	r.Consumers = make([]ConsumerConfig, len(c.Consumers))
	handlers = WithSelftest(c, handlers)
	for i := range c.Consumers {
		cc, err := c.resolvedConsumer(c.Consumers[i], handlers)
		if err != nil {
			return c, err
		}
		r.Consumers[i] = cc
	}
	return r, nil
}

// resolvedStreams reads the limits back from the configuration of HOOKS,
// which serve creates with them (EVENTS takes the same ones). max_age is
// HOOKS's replay horizon, which the storage guard applies (the stream
// itself has no JetStream max age). max_bytes stays as written: its
// default depends on the server's store and is logged when serve starts.
func resolvedStreams(s StreamsConfig) StreamsConfig {
	o := stream.Options{Replicas: s.Replicas, DuplicateWindow: s.DuplicateWindow, MaxAge: s.MaxAge, MaxBytes: s.MaxBytes}
	hooks := stream.HooksConfig(o)
	s.Replicas, s.DuplicateWindow, s.MaxAge = hooks.Replicas, hooks.Duplicates, o.HooksMaxAge()
	s.Partitions = s.PartitionsOrDefault()
	return s
}

// resolvedRelay fills the relay's settings with [relay.Options]'
// defaults. A retention of 0 (delete messages as they are published) or
// below (keep them) stays as written.
func resolvedRelay(r RelayConfig) RelayConfig {
	if r.BatchSize <= 0 {
		r.BatchSize = relay.DefaultBatchSize
	}
	if r.PollInterval <= 0 {
		r.PollInterval = relay.DefaultPollInterval
	}
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = relay.DefaultMaxAttempts
	}
	if r.Retention == nil {
		d := relay.DefaultRetention
		r.Retention = &d
	}
	return r
}

// resolved gives the source the tolerance its verifier applies (the
// default for the schemes that sign a timestamp, see [verify.Options];
// none, 0, for those that sign none: github, shopify, hmac without a
// timestamp header) and the ordering key the ingress reads.
func (s SourceConfig) resolved() SourceConfig {
	signsTime := s.Scheme == verify.SchemeStandardWebhooks || s.Scheme == verify.SchemeStripe ||
		s.Scheme == verify.SchemeSlack || (s.Scheme == verify.SchemeHMAC && s.HMAC.TimestampHeader != "")
	if s.Tolerance == 0 && signsTime {
		s.Tolerance = verify.DefaultTolerance
	}
	if s.Scheme == verify.SchemeHMAC && s.HMAC.TimestampHeader != "" && s.HMAC.Tolerance == 0 {
		s.HMAC.Tolerance = s.Tolerance
	}
	// The ordering key the ingress reads: as configured, else the
	// scheme's default, else none.
	if f := s.orderingKey(); f != nil {
		s.OrderingKey = &KeyConfig{Header: f.Header, Pointer: f.Pointer}
	} else {
		s.OrderingKey = &KeyConfig{None: true}
	}
	return s
}

// resolvedConsumer is cc with the options serve builds for it (see
// Server.consumers) resolved by the consumer package itself.
func (c Config) resolvedConsumer(cc ConsumerConfig, handlers Handlers) (ConsumerConfig, error) {
	h, err := cc.NewHandler(handlers)
	if err != nil {
		return cc, err
	}
	o := engine.Options{
		Name: cc.Name, Sources: cc.Sources, EventTypes: cc.Types(handlers), Handler: h,
		Concurrency: c.Concurrency(&cc), BatchSize: cc.BatchSize, BatchWait: cc.BatchWait, AckWait: cc.AckWait,
		MaxDeliver: cc.MaxDeliver, MaxAckPending: cc.MaxAckPending, HandlerTimeout: cc.HandlerTimeout, Backoff: cc.Backoff,
		PostponeLimit: cc.PostponeLimit, Partitions: c.ConsumerPartitions(&cc),
	}.WithDefaults()
	if err := o.Validate(); err != nil {
		return cc, err
	}
	cc.EventTypes = o.EventTypes
	cc.Concurrency, cc.BatchSize, cc.BatchWait, cc.AckWait = o.Concurrency, o.BatchSize, o.BatchWait, o.AckWait
	cc.MaxDeliver, cc.MaxAckPending, cc.HandlerTimeout = o.MaxDeliver, o.MaxAckPending, o.HandlerTimeout
	cc.Backoff = slices.Clone(o.Backoff)
	cc.PostponeLimit = o.PostponeLimit
	return cc, nil
}
