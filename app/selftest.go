package app

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/selftest"
	"github.com/hookbridge/hookbridge/schema"
)

// selftestBackoff is the self-test consumer's redelivery delay: the
// failure-before-commit check waits for one redelivery.
const selftestBackoff = 250 * time.Millisecond

// AddSelftest adds the self-test's source and consumer (both named
// selftest.Source) when selftest.enabled is set and they are not there
// yet; [Load] calls it. The source takes the self-test's secrets and the
// Standard Webhooks scheme; the consumer receives only that source's
// selftest.EventType.
func (c *Config) AddSelftest() {
	if !c.Selftest.Enabled {
		return
	}
	if c.Source(selftest.Source) == nil {
		c.Sources = append(c.Sources, SourceConfig{Name: selftest.Source, Scheme: verify.SchemeStandardWebhooks,
			Secrets: c.Selftest.Secrets, SecretEnv: c.Selftest.SecretEnv, SecretFile: c.Selftest.SecretFile})
	}
	if c.Consumer(selftest.Consumer) == nil {
		c.Consumers = append(c.Consumers, ConsumerConfig{Name: selftest.Consumer, Handler: selftest.HandlerName,
			Sources: []string{selftest.Source}, EventTypes: []string{selftest.EventType},
			Backoff: []time.Duration{selftestBackoff}})
	}
}

// SelftestHandler is the self-test's handler spec: the real handler for
// an empty fault, else one with that fault planted ("skip-inbox",
// "double-apply"), which only hookbridge's own tests of the self-test use.
func SelftestHandler(fault string) HandlerSpec {
	return HandlerSpec{
		New: func(name string) consumer.Handler {
			h, err := selftest.NewHandler(name, selftest.Options{Fault: fault})
			if err != nil {
				// Only a test plants faults; an unknown one fails every
				// event loudly instead of running a wrong handler.
				return consumer.HandlerFunc(func(_ context.Context, _ pgx.Tx, _ consumer.Event) error { return err })
			}
			return h
		},
		EventTypes: []string{selftest.EventType},
		Migrations: []schema.Set{selftest.Migrations()},
	}
}

// WithSelftest is handlers with the self-test's handler added when cfg
// enables the self-test and handlers has none of that name (a test may
// register one with a planted fault). handlers itself is not changed.
func WithSelftest(cfg Config, handlers Handlers) Handlers {
	if !cfg.Selftest.Enabled {
		return handlers
	}
	if _, ok := handlers[selftest.HandlerName]; ok {
		return handlers
	}
	out := make(Handlers, len(handlers)+1)
	for k, v := range handlers {
		out[k] = v
	}
	out[selftest.HandlerName] = SelftestHandler(selftest.FaultNone)
	return out
}

// selftestSource names the self-test's source where config errors are
// worded.
const selftestSource = selftest.Source
