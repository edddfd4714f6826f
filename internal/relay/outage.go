package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultOutageRepeat is how often a failure that goes on (the database or
// NATS unreachable) is logged again after its first line.
const DefaultOutageRepeat = time.Minute

// outageLog logs a failure that repeats until something recovers: one
// WARN with the error when it starts, then at most one every repeat
// (saying for how long and how many failures were not logged), each
// other failure at DEBUG only, and one INFO when it ends. A relay retries
// every second or faster while Postgres is down; a line per retry would
// flood the log and hide the one line that matters.
type outageLog struct {
	log    *slog.Logger
	what   string // what is failing, as the start of each message
	repeat time.Duration
	now    func() time.Time

	mu         sync.Mutex
	down       bool
	since      time.Time // first failure of this outage
	lastLogged time.Time
	failures   int // since the outage began
	unlogged   int // since the last WARN
}

func newOutageLog(log *slog.Logger, what string, repeat time.Duration) *outageLog {
	if repeat <= 0 {
		repeat = DefaultOutageRepeat
	}
	return &outageLog{log: log, what: what, repeat: repeat, now: time.Now}
}

// fail records one failure; attrs are added to the line when one is
// logged.
func (o *outageLog) fail(ctx context.Context, err error, attrs ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	o.failures++
	switch {
	case !o.down:
		o.down, o.since, o.lastLogged, o.unlogged = true, now, now, 0
		o.log.WarnContext(ctx, o.what+" failing", append([]any{"err", err}, attrs...)...)
	case now.Sub(o.lastLogged) >= o.repeat:
		o.log.WarnContext(ctx, o.what+" still failing", append([]any{"err", err,
			"for", now.Sub(o.since).Round(time.Second), "failures_not_logged", o.unlogged}, attrs...)...)
		o.lastLogged, o.unlogged = now, 0
	default:
		o.unlogged++
		o.log.DebugContext(ctx, o.what+" failing", append([]any{"err", err}, attrs...)...)
	}
}

// ok records a success: the end of an outage, if one was going on.
func (o *outageLog) ok(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down {
		return
	}
	o.log.InfoContext(ctx, o.what+" recovered", "after", o.now().Sub(o.since).Round(time.Millisecond), "failures", o.failures)
	o.down, o.failures, o.unlogged = false, 0, 0
}
