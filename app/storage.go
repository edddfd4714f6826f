package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The streams refuse new messages when full (discard: new), so a full
// HOOKS never loses an accepted webhook. HOOKS has no JetStream max age
// either, which would delete messages whether applied or not. The store
// guard deletes what no consumer needs any more, and only that: HOOKS
// messages below the retention floor of every consumer on it (the
// messages every one of them has applied, dead-lettered or will never
// receive; durables.Floor), when they are older than streams.max_age (the
// replay horizon), or sooner when space runs short (trim.go).

// Storage guard defaults.
const (
	defaultGuardInterval = 5 * time.Second
	// Above guardHighWater of the byte bound HOOKS is trimmed, down to
	// guardLowWater when the retention floors allow it.
	guardHighWater = 0.90
	guardLowWater  = 0.75
	// ageSlack is how far past max_age (as a share of it) the oldest
	// message may get before the guard trims by age: it then trims down
	// to max_age, so trims by age come once per slack (3.6 hours at the
	// 3-day default), not at every look.
	ageSlack = 0.05
)

// storeGuard watches the streams' room, trims HOOKS of what no consumer
// needs when it is older than the age horizon or space runs short, and
// reports for readiness whether HOOKS and EVENTS refuse new messages.
type storeGuard struct {
	js  jetstream.JetStream
	log *slog.Logger
	m   *metrics.Registry
	// consumers are the durables this deployment configures (each
	// consumer's own and its partition durables): until each exists,
	// nothing is trimmed (its messages are all unapplied). A durable that
	// maps to none of their consumers is an orphan (orphans.go).
	consumers []string
	// keyless are the configured consumers none of whose sources has an
	// ordering key, with their sources (empty: all): an instance whose
	// configuration still keys one stores keyed messages only their
	// partition durables read, so while HOOKS holds such messages those
	// durables are needed too (keylessNeeded).
	keyless map[string][]string
	// refused, when set, reports why the ingress's publishes are being
	// refused for storage or limit reasons (nil while they are not): the
	// signal for a full server store, which no stream info shows.
	refused  func() error
	interval time.Duration
	// maxAge is HOOKS's horizon for applied messages (0: no trim by age).
	maxAge time.Duration
	// maxBytes is the byte bound HOOKS should have (-1: none; 0: the
	// stream's own limit, as it is). The guard lowers the stream's limit
	// to it once the stream fits well under it (stream.SafeMaxBytes).
	maxBytes int64
	// removeSelftest: serve runs without the self-test, whose durable
	// then goes (selftest.RemoveDurable).
	removeSelftest bool
	// events, when delivery endpoints are configured, trims EVENTS of what
	// every endpoint has received (eventstrim.go); nil: EVENTS is left as
	// it is.
	events *eventsGuard

	floors    durables.FloorCache
	hooksFull atomic.Pointer[error]
	// stranded are the warnings about durables that hold accepted
	// messages no configured consumer applies (orphans.go), for /readyz.
	stranded   atomic.Pointer[[]string]
	eventsFull atomic.Pointer[error]
	limiter    logLimiter
	// slow limits the lines that repeat while a consumer is behind.
	slow logLimiter
}

func (g *storeGuard) run(ctx context.Context) error {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		if err := g.check(ctx); err != nil && ctx.Err() == nil {
			g.limiter.log(g.log, slog.LevelWarn, "storage check", "storage check failed; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// check looks at both streams once and trims HOOKS of what no consumer
// needs, and EVENTS of what every endpoint has received, when that is
// due.
func (g *storeGuard) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hooks, err := g.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream.Hooks, err)
	}
	info := hooks.CachedInfo() // read before the consumers: see durables.Floor
	consumers, err := durables.List(ctx, hooks)
	if err != nil {
		return err
	}
	g.watchDurables(ctx, consumers)
	var refused error
	if g.refused != nil {
		refused = g.refused()
	}
	trimmed, err := g.trim(ctx, hooks, info, consumers, refused != nil)
	if err != nil {
		return err
	}
	if trimmed > 0 {
		if info, err = hooks.Info(ctx); err != nil {
			return fmt.Errorf("stream %s: %w", stream.Hooks, err)
		}
	}
	g.lowerLimit(ctx, info)
	// The ingress's refusal clears itself (on the next stored publish, or
	// once its probe sees room again); readiness asks it directly.
	g.record(&g.hooksFull, info, stream.AtLimit(info), refused != nil)

	events, err := g.js.Stream(ctx, stream.Events)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream.Events, err)
	}
	einfo := events.CachedInfo() // read before the consumers, as HOOKS's
	// A failed trim of EVENTS still lets readiness and HOOKS_CONFLICTS's
	// trim go on; check reports it.
	var eventsErr error
	if g.events != nil {
		trimmed, err := g.trimEvents(ctx, events, einfo)
		if err == nil && trimmed > 0 {
			var fresh *jetstream.StreamInfo
			if fresh, err = events.Info(ctx); err == nil {
				einfo = fresh
			} else {
				err = fmt.Errorf("stream %s: %w", stream.Events, err)
			}
		}
		if eventsErr = err; err == nil {
			g.lowerTo(ctx, einfo, g.events.maxBytes)
		}
	}
	g.record(&g.eventsFull, einfo, stream.AtLimit(einfo), false)
	return errors.Join(eventsErr, g.trimConflicts(ctx))
}

// record keeps full for readiness and updates the stream's gauges
// (refused: the ingress's publishes are refused, which counts as full).
func (g *storeGuard) record(dst *atomic.Pointer[error], info *jetstream.StreamInfo, full error, refused bool) {
	if full == nil {
		dst.Store(nil)
	} else {
		dst.Store(&full)
	}
	if g.m != nil {
		g.m.StreamState(info.Config.Name, info.State.Bytes, info.Config.MaxBytes, full != nil || refused)
	}
}

// hooksRoom is nil while HOOKS takes new deliveries: the ingress's
// publishes are not being refused, and at the last check the stream had
// room for another message of the usual size (which also covers a
// restart with a full stream, before any delivery was tried).
func (g *storeGuard) hooksRoom(context.Context) error {
	if g.refused != nil {
		if err := g.refused(); err != nil {
			return err
		}
	}
	return loadErr(&g.hooksFull)
}

// eventsRoom is nil while EVENTS takes new messages, as of the last check.
func (g *storeGuard) eventsRoom(context.Context) error { return loadErr(&g.eventsFull) }

func loadErr(p *atomic.Pointer[error]) error {
	if e := p.Load(); e != nil {
		return *e
	}
	return nil
}

// logLimiter lets a repeated log line through once per interval per key,
// counting what it held back.
type logLimiter struct {
	mu    sync.Mutex
	every time.Duration // 0 = one minute
	last  map[string]time.Time
	held  map[string]int
}

func (l *logLimiter) log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	l.mu.Lock()
	every := l.every
	if every <= 0 {
		every = time.Minute
	}
	if l.last == nil {
		l.last, l.held = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[key]; ok && time.Since(t) < every {
		l.held[key]++
		l.mu.Unlock()
		return
	}
	if n := l.held[key]; n > 0 {
		args = append(args, "repeats_not_logged", n)
	}
	l.last[key], l.held[key] = time.Now(), 0
	l.mu.Unlock()
	log.Log(context.Background(), level, msg, args...)
}

// keylessNeeded are the partition durables of the keyless consumers
// whose sources have keyed messages in HOOKS: until each exists (the
// consumer creates them within a look, engine's keyedRecheck), nothing
// is trimmed, or those messages, answered 2xx and matched by no other
// durable's filter, would be purged unapplied.
func (g *storeGuard) keylessNeeded(ctx context.Context, hooks jetstream.Stream) []string {
	if len(g.keyless) == 0 {
		return nil
	}
	n, err := stream.PartitionCount(ctx, g.js)
	if err != nil || n == 0 {
		return nil
	}
	var out []string
	for name, sources := range g.keyless {
		if len(sources) == 0 {
			sources = []string{"*"}
		}
		for _, src := range sources {
			if _, err := hooks.GetLastMsgForSubject(ctx, stream.HooksKeyedRoot+".*."+src+".>"); err == nil {
				for p := range n {
					out = append(out, stream.PartitionDurable(name, p))
				}
				break
			}
		}
	}
	return out
}
