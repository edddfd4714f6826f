package app

import (
	"slices"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Resolved is cfg with every setting it leaves to a default given the
// value serve runs with, for `hookbridge config check`. Each value is
// asked of the code that applies it: the consumers' options of
// [Config.consumerOptions] (the engine's defaults), the relay's of
// [relay.Options.WithDefaults], the streams' from the stream
// configurations serve creates, the inbox retention from
// [Config.InboxRetentionOrDefault], the ingress's limits and the
// verifiers' tolerances from the defaults they document. A key added to
// Config is printed as configured; one with a default needs a line here.
func (c Config) Resolved(handlers Handlers) (Config, error) {
	r := c.withDefaults()
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

// resolvedRelay is r with the settings the relay runs with
// ([relay.Options.WithDefaults]). A retention of 0 (delete messages as
// they are published) or below (keep them) stays as written.
func resolvedRelay(r RelayConfig) RelayConfig {
	o := r.options().WithDefaults()
	r.BatchSize, r.PollInterval, r.MaxAttempts = o.BatchSize, o.PollInterval, o.MaxAttempts
	if !o.DeleteSent {
		r.Retention = &o.Retention
	}
	return r
}

// resolved gives the source the tolerance its verifier applies (the
// scheme's default for one that signs a timestamp; none, 0, for one that
// signs none: see [verify.Scheme.Tolerance]) and the ordering key the
// ingress reads.
func (s SourceConfig) resolved() SourceConfig {
	if sc, ok := verify.LookupScheme(s.Scheme); ok && s.Tolerance == 0 {
		s.Tolerance = sc.Tolerance(verify.HMACConfig(s.HMAC))
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

// resolvedConsumer is cc with the event types and the settings of the
// options serve runs it with ([Config.consumerOptions]).
func (c Config) resolvedConsumer(cc ConsumerConfig, handlers Handlers) (ConsumerConfig, error) {
	o, err := c.consumerOptions(&cc, handlers)
	if err != nil {
		return cc, err
	}
	cc.EventTypes = o.EventTypes
	for _, s := range consumerSettings(&cc, &o) {
		s.out()
	}
	cc.Backoff = slices.Clone(cc.Backoff) // the engine's default schedule is shared
	return cc, nil
}
