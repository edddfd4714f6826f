package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/selftest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A durable on HOOKS that no configured consumer owns (a consumer taken
// out of the configuration, the self-test's after it was disabled) keeps
// every message it has not acked in HOOKS, and holds the storage guard's
// floor: nothing after it is ever trimmed, until HOOKS is full and every
// sender gets 503. Nothing deletes it by itself but the self-test's (see
// watchDurables): status, the console and a metric show them, and
// `hookbridge consumers delete NAME` removes one.

// orphaned reports whether ci is a durable on HOOKS that belongs to no
// configured consumer: neither a consumer's own durable nor one of its
// partition durables. Ephemeral consumers (replays, look-ups) are not
// durables and go by themselves.
func orphaned(ci *jetstream.ConsumerInfo, configured []string) bool {
	if ci.Config.Durable == "" || strings.HasPrefix(ci.Name, replayConsumerPrefix) {
		return false
	}
	owner, _ := stream.ConsumerOfDurable(ci.Name)
	return owner == "" || !slices.Contains(configured, owner)
}

// orphanNames are the orphaned durables among consumers, sorted.
func orphanNames(consumers []*jetstream.ConsumerInfo, configured []string) []string {
	out := []string{}
	for _, ci := range consumers {
		if orphaned(ci, configured) {
			out = append(out, ci.Name)
		}
	}
	slices.Sort(out)
	return out
}

// watchDurables reports the orphaned durables on HOOKS and, when serve
// runs without the self-test, removes the self-test's.
func (g *storeGuard) watchDurables(ctx context.Context, consumers []*jetstream.ConsumerInfo) {
	orphans := orphanNames(consumers, g.consumers)
	g.noteStranded(consumers)
	if g.m != nil {
		g.m.OrphanedDurables(orphans)
	}
	selftestOrphan := slices.ContainsFunc(orphans, func(name string) bool {
		owner, _ := stream.ConsumerOfDurable(name)
		return owner == selftest.Consumer
	})
	if g.removeSelftest && selftestOrphan {
		r, err := selftest.RemoveDurable(ctx, g.js)
		switch {
		case err != nil:
			g.limiter.log(g.log, slog.LevelWarn, "selftest durable", "could not remove the self-test's durable; will retry", "err", err)
		case r.Kept != "":
			g.slowLog(slog.LevelWarn, "selftest durable", "the self-test is not enabled, but its durable stays on HOOKS", "reason", r.Kept)
		case len(r.Deleted) > 0:
			g.log.Info("the self-test is not enabled: removed its durable from HOOKS", "durables", r.Deleted, "self_test_messages_purged", r.Purged)
			return
		}
	}
	if len(orphans) > 0 {
		g.slowLog(slog.LevelWarn, "orphans", "durables on HOOKS that no configured consumer owns keep every message they have not acked; "+
			"remove them with `hookbridge consumers delete NAME`", "durables", orphans)
	}
}

// noteStranded keeps, for /readyz, a warning for every orphaned durable
// that still holds messages: accepted (answered 2xx) and applied by no
// configured consumer. Readiness stays up (the ingress and the other
// consumers are fine); the warning names the command that removes it.
func (g *storeGuard) noteStranded(consumers []*jetstream.ConsumerInfo) {
	warnings := []string{}
	for _, ci := range consumers {
		if !orphaned(ci, g.consumers) || ci.NumPending+uint64(ci.NumAckPending) == 0 {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("durable %s on HOOKS belongs to no configured consumer and holds %d unapplied message(s): "+
			"configure its consumer again to apply them, or remove it with `hookbridge consumers delete %s`",
			ci.Name, ci.NumPending+uint64(ci.NumAckPending), ci.Name))
	}
	slices.Sort(warnings)
	g.stranded.Store(&warnings)
}

// strandedWarnings are the warnings noteStranded keeps.
func (g *storeGuard) strandedWarnings() []string {
	if w := g.stranded.Load(); w != nil {
		return *w
	}
	return nil
}
