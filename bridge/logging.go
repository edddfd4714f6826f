package bridge

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultLogInterval is how often at most one line is logged per cause of
// refusal (see [Options.LogInterval]).
const DefaultLogInterval = 10 * time.Second

// logRequest writes what is worth logging about one answered request.
//
// At the debug level every request gets a line (for diagnosis). Above it
// a success logs nothing, since the metrics count requests; a refusal is
// logged at warn (error for the broker failing), but at most once per
// cause (source, status, reason) per LogInterval, with the number of
// lines suppressed since. A flood of bad or refused requests, or a full
// stream refusing every publish, then writes a few lines a minute instead
// of one per request.
func (h *Handler) logRequest(ctx context.Context, res result, start time.Time) {
	lg := h.opts.Logger
	level := levelOf(res)
	if lg.Enabled(ctx, slog.LevelDebug) {
		if res.code < 300 {
			level = slog.LevelDebug
		}
		lg.Log(ctx, level, "webhook", h.requestAttrs(res, start)...)
		return
	}
	if res.code < 300 || !lg.Enabled(ctx, level) {
		return
	}
	source := res.source
	if _, known := h.sources[source]; !known {
		source = "" // an unknown name must not grow the limiter's map
	}
	ok, suppressed := h.limiter.allow(logKey{source: source, code: res.code, reason: res.reason}, h.opts.Now())
	if !ok {
		return
	}
	attrs := h.requestAttrs(res, start)
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	lg.Log(ctx, level, "webhook", attrs...)
}

func levelOf(res result) slog.Level {
	switch {
	case res.code >= 500 && res.reason != reasonOverloaded:
		return slog.LevelError
	case res.code >= 400:
		return slog.LevelWarn
	default:
		return slog.LevelInfo
	}
}

func (h *Handler) requestAttrs(res result, start time.Time) []any {
	attrs := []any{"source", res.source, "status", res.code, "outcome", res.body.Status, "duration", time.Since(start)}
	if res.body.EventID != "" {
		attrs = append(attrs, "event_id", res.body.EventID)
	}
	if res.reason != "" {
		attrs = append(attrs, "reason", res.reason)
	}
	if res.unkeyed != "" {
		// Why the delivery went without order (absent, unreadable): an
		// operator looking into hookbridge_ingress_unkeyed_total at debug.
		attrs = append(attrs, "unkeyed", res.unkeyed)
	}
	if res.err != nil {
		attrs = append(attrs, "err", res.err)
	}
	return attrs
}

type logKey struct {
	source string
	code   int
	reason string
}

// logLimiter lets one line per key through per interval and counts the
// others.
type logLimiter struct {
	every time.Duration // <= 0: every line
	mu    sync.Mutex
	slots map[logKey]*logSlot
}

type logSlot struct {
	at         time.Time
	suppressed int
}

// maxLogKeys bounds the limiter's memory; reasons are a fixed set of
// short causes, so the bound is reached only by a bug, and then the map
// starts over (a few extra lines, never unbounded growth).
const maxLogKeys = 1024

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, slots: map[logKey]*logSlot{}}
}

// allow reports whether a line for k may be written at now, and how many
// were suppressed since the last one written.
func (l *logLimiter) allow(k logKey, now time.Time) (bool, int) {
	if l.every <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.slots[k]
	if !ok {
		if len(l.slots) >= maxLogKeys {
			clear(l.slots)
		}
		l.slots[k] = &logSlot{at: now}
		return true, 0
	}
	if now.Sub(s.at) < l.every {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.at, s.suppressed = now, 0
	return true, n
}
