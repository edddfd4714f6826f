package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/selftest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The orphaned durables on HOOKS (see [durables.Orphaned], the rule
// status, the console, the metrics and /readyz share): the guard reports
// them and, when serve runs without the self-test, removes the
// self-test's, which nothing else would.

// watchDurables reports the orphaned durables on HOOKS and, when serve
// runs without the self-test, removes the self-test's.
func (g *storeGuard) watchDurables(ctx context.Context, consumers []*jetstream.ConsumerInfo) {
	orphans := durables.Orphans(consumers, g.consumers)
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
		if !durables.Orphaned(ci, g.consumers) || ci.NumPending+uint64(ci.NumAckPending) == 0 {
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
