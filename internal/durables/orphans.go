package durables

import (
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// A durable on HOOKS that no configured consumer owns (a consumer taken
// out of the configuration, the self-test's after it was disabled) keeps
// every message it has not acked in HOOKS, and holds the storage guard's
// floor: nothing after it is ever trimmed, until HOOKS is full and every
// sender gets 503. Status, the console, a metric and /readyz show them,
// all by [Orphaned]; `hookbridge consumers delete NAME` removes one.

// Orphaned reports whether ci is a durable on HOOKS that belongs to no
// consumer of configured: neither a consumer's own durable nor one of its
// partition durables. Ephemeral consumers (replays, look-ups) are not
// durables and go by themselves.
func Orphaned(ci *jetstream.ConsumerInfo, configured []string) bool {
	if ci.Config.Durable == "" || strings.HasPrefix(ci.Name, ReplayPrefix) {
		return false
	}
	owner, _ := stream.ConsumerOfDurable(ci.Name)
	return owner == "" || !slices.Contains(configured, owner)
}

// Orphans are the orphaned durables among consumers, sorted.
func Orphans(consumers []*jetstream.ConsumerInfo, configured []string) []string {
	out := []string{}
	for _, ci := range consumers {
		if Orphaned(ci, configured) {
			out = append(out, ci.Name)
		}
	}
	slices.Sort(out)
	return out
}
