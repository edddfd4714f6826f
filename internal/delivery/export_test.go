package delivery

import (
	"time"

	"github.com/hookbridge/hookbridge/internal/store"
)

// Fast gives o the timings the tests use: the same rules, in seconds
// rather than tens of seconds.
func Fast(o *Options) {
	o.t = &timings{pullWait: 500 * time.Millisecond, pinnedTTL: 1500 * time.Millisecond, beat: 200 * time.Millisecond,
		memberTTL: 2 * time.Second, leaseMargin: 3 * time.Second, actMargin: 300 * time.Millisecond,
		pgPoll: 2 * time.Second, probeMin: 200 * time.Millisecond, prepare: 300 * time.Millisecond}
}

// PinnedTTL is the pin's TTL of o's timings.
func PinnedTTL(o *Options) time.Duration { return o.t.pinnedTTL }

// SetAfterSend makes the senders call f after each attempt's answer and
// before it is recorded or acked; f returning true drops the delivery
// there, as a crash of the process would.
func SetAfterSend(o *Options, f func(eventID string, status int) bool) { o.hooks.afterSend = f }

// SetBeforeSend makes the senders call f before each request; an error
// is a failure before the send (nothing is sent).
func SetBeforeSend(o *Options, f func(eventID string) error) { o.hooks.beforeSend = f }

// Kill makes m stop as a killed process would: attempts in flight are
// cut, nothing is handed back, no lease is given up. Call it before
// cancelling Run's context.
func Kill(m *Manager) {
	m.abandon.Store(true)
	m.kill()
}

// Refused exposes the address rule to the tests.
var Refused = refused

// Assign returns the endpoints instance self reads when members (each
// having endpoints) run the delivery role.
func Assign(members []string, self string, endpoints []string) []string {
	ms := make([]store.DeliveryInstance, len(members))
	for i, m := range members {
		ms[i] = store.DeliveryInstance{ID: m, Endpoints: endpoints}
	}
	return assign(ms, self, endpoints)
}

// SetAfterDeadLetter makes the senders call f after a dead letter is
// committed and before its message is terminated; f returning true drops
// the delivery there, as a crash of the process would.
func SetAfterDeadLetter(o *Options, f func(eventID string) bool) { o.hooks.afterDeadLetter = f }

// SetMayStart makes the senders call f when an attempt is about to start
// (its slot and the rate limiter let it go); false stops it there, as a
// lapsed lease would: nothing is sent.
func SetMayStart(o *Options, f func(eventID string) bool) { o.hooks.mayStart = f }
