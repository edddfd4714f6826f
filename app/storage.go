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

	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The streams refuse new messages when full (discard: new), so a full
// HOOKS never loses an accepted webhook; but it stays full while it keeps
// messages by age, long after the consumers have applied them. The store
// guard makes room again without losing an unapplied message: it purges
// HOOKS only below the ack floor of every consumer on it (the messages
// every one of them has applied or dead-lettered), and only when space
// runs short, so replays keep reaching back as far as possible otherwise.

// Storage guard defaults.
const (
	defaultGuardInterval = 5 * time.Second
	// Above highWater of a byte limit HOOKS is trimmed, down to lowWater
	// when the ack floors allow it.
	guardHighWater = 0.90
	guardLowWater  = 0.75
)

// storeGuard watches the streams' room, trims HOOKS when space runs
// short, and reports for readiness whether HOOKS and EVENTS refuse new
// messages.
type storeGuard struct {
	js  jetstream.JetStream
	log *slog.Logger
	m   *metrics.Registry
	// consumers are the durable consumers this deployment configures: until
	// each exists, nothing is trimmed (its messages are all unapplied).
	consumers []string
	// refused, when set, reports why the ingress's publishes are being
	// refused for storage or limit reasons (nil while they are not): the
	// signal for a full server store, which no stream info shows.
	refused  func() error
	interval time.Duration

	hooksFull  atomic.Pointer[error]
	eventsFull atomic.Pointer[error]
	limiter    logLimiter
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

// check looks at both streams once and trims HOOKS if it is short of space.
func (g *storeGuard) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hooks, err := g.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream.Hooks, err)
	}
	info := hooks.CachedInfo()
	var refused error
	if g.refused != nil {
		refused = g.refused()
	}
	if refused != nil || aboveHighWater(info) {
		trimmed, err := g.trim(ctx, hooks, info, refused != nil)
		if err != nil {
			return err
		}
		if trimmed > 0 {
			if info, err = hooks.Info(ctx); err != nil {
				return fmt.Errorf("stream %s: %w", stream.Hooks, err)
			}
		}
	}
	// The ingress's refusal clears itself (on the next stored publish, or
	// once its probe sees room again); readiness asks it directly.
	g.record(&g.hooksFull, info, atLimit(info), refused != nil)

	events, err := g.js.Stream(ctx, stream.Events)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream.Events, err)
	}
	g.record(&g.eventsFull, events.CachedInfo(), atLimit(events.CachedInfo()), false)
	return nil
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

// trim purges HOOKS below the lowest ack floor of its consumers: of a byte
// limit down to the low-water mark, or (the server's store is full, whose
// size no client can see) everything every consumer has acked. It
// returns how many messages it purged.
func (g *storeGuard) trim(ctx context.Context, hooks jetstream.Stream, info *jetstream.StreamInfo, all bool) (uint64, error) {
	floor, holder, err := lowestAckFloor(ctx, hooks, info.State.LastSeq, g.consumers)
	if err != nil {
		g.limiter.log(g.log, slog.LevelWarn, "trim", "HOOKS is short of space and cannot be trimmed", "reason", err)
		return 0, nil
	}
	st := info.State
	if floor < st.FirstSeq {
		g.limiter.log(g.log, slog.LevelWarn, "trim", "HOOKS is short of space; nothing to trim until every consumer has applied more",
			"first_seq", st.FirstSeq, "lowest_ack_floor", floor, "held_by", holder)
		return 0, nil
	}
	upTo := floor + 1 // purged: sequences below upTo
	if !all && info.Config.MaxBytes > 0 && st.Msgs > 0 {
		excess := float64(st.Bytes) - guardLowWater*float64(info.Config.MaxBytes)
		perMsg := float64(st.Bytes) / float64(st.Msgs)
		if n := uint64(excess/perMsg) + 1; st.FirstSeq+n < upTo {
			upTo = st.FirstSeq + n
		}
	}
	if err := hooks.Purge(ctx, jetstream.WithPurgeSequence(upTo)); err != nil {
		return 0, fmt.Errorf("trim %s below sequence %d: %w", stream.Hooks, upTo, err)
	}
	purged := upTo - st.FirstSeq
	if g.m != nil {
		g.m.HooksTrimmed(purged)
	}
	g.log.Info("trimmed HOOKS to make room: purged messages every consumer had acked; replays now reach back to replay_from_seq",
		"purged", purged, "replay_from_seq", upTo, "lowest_ack_floor", floor, "held_by", holder)
	return purged, nil
}

// lowestAckFloor is the lowest ack floor (stream sequence) of every
// consumer on HOOKS, durable or not (a running replay counts too), and
// the consumer holding it. It is an error when there is no consumer, or
// a configured durable does not exist yet: then nothing is applied.
//
// A consumer with nothing pending and nothing unacked holds nothing back
// up to lastSeq, the stream's last sequence read before the consumers:
// its own ack floor stays at the last message its filter matched (a
// consumer of a rare type, a partition without traffic, the unkeyed
// durable of a keyed source), which would hold every other message.
func lowestAckFloor(ctx context.Context, hooks jetstream.Stream, lastSeq uint64, configured []string) (uint64, string, error) {
	floor, holder, seen := uint64(0), "", map[string]bool{}
	list := hooks.ListConsumers(ctx)
	for ci := range list.Info() {
		f := ci.AckFloor.Stream
		if ci.NumPending == 0 && ci.NumAckPending == 0 && ci.NumRedelivered == 0 {
			f = max(f, lastSeq)
		}
		if holder == "" || f < floor {
			floor, holder = f, ci.Name
		}
		seen[ci.Name] = true
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return 0, "", fmt.Errorf("list consumers of %s: %w", stream.Hooks, err)
	}
	for _, name := range configured {
		if !seen[name] {
			return 0, "", fmt.Errorf("durable consumer %s does not exist yet", name)
		}
	}
	if holder == "" {
		return 0, "", errors.New("no consumer reads HOOKS")
	}
	return floor, holder, nil
}

func aboveHighWater(info *jetstream.StreamInfo) bool {
	return info.Config.MaxBytes > 0 && float64(info.State.Bytes) >= guardHighWater*float64(info.Config.MaxBytes)
}

// atLimit says why a stream refuses its next message of a typical size,
// nil while it has room. (A full server store shows only in refused
// publishes.)
func atLimit(info *jetstream.StreamInfo) error {
	st, cfg := info.State, info.Config
	if cfg.MaxMsgs > 0 && int64(st.Msgs) >= cfg.MaxMsgs {
		return fmt.Errorf("stream %s full: %d of %d messages", cfg.Name, st.Msgs, cfg.MaxMsgs)
	}
	if cfg.MaxBytes > 0 {
		room := int64(1)
		if st.Msgs > 0 {
			room = int64(st.Bytes / st.Msgs)
		}
		if cfg.MaxBytes-int64(st.Bytes) < room {
			return fmt.Errorf("stream %s full: %d of %d bytes", cfg.Name, st.Bytes, cfg.MaxBytes)
		}
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
