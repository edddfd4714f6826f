// Package app wires hookbridge's parts into the `hookbridge` command:
// configuration, the serve roles (ingress, consumers, relay), migrations
// and the operator commands. cmd/hookbridge is a thin main around [Main];
// a team that writes its own handlers builds its own main the same way,
// passing its [Handlers].
package app

import (
	"sort"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/schema"
)

// HandlerSpec is a handler a configuration can name.
type HandlerSpec struct {
	// New builds the handler for the consumer with the given name.
	New func(consumerName string) consumer.Handler
	// EventTypes are the types the handler understands; a consumer that
	// lists none in the configuration receives these.
	EventTypes []string
	// Migrations are the handler's own schema sets, applied with
	// hookbridge's at start-up and by `hookbridge migrate`.
	Migrations []schema.Set
}

// Handlers maps handler names (as written in the configuration) to specs.
type Handlers map[string]HandlerSpec

// Names lists the registered handler names, sorted.
func (h Handlers) Names() []string {
	out := make([]string, 0, len(h))
	for n := range h {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// BuiltinHandlers are the handlers shipped with hookbridge: the demo
// orders domain.
func BuiltinHandlers() Handlers {
	return Handlers{
		"orders": {
			New:        func(name string) consumer.Handler { return orders.Handler(name) },
			EventTypes: []string{orders.Created, orders.Paid, orders.Cancelled},
			Migrations: []schema.Set{orders.Migrations()},
		},
	}
}
