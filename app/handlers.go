// Package app is hookbridge as a library: its configuration and the
// wiring of its roles (ingress, consumers, outbox relay, storage guard,
// health, metrics and tracing) into a [Server]. It has no command line
// and no handlers of its own: a program registers its [Handlers] and runs
// a Server, or hands both to the commands in package cli, as
// cmd/hookbridge does.
package app

import (
	"sort"

	"github.com/hookbridge/hookbridge/consumer"
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
