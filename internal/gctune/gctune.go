// Package gctune gives the garbage collector of a serve process a fixed
// amount of headroom over the live heap, instead of Go's default of
// doubling it.
//
// serve's live heap is small when NATS is external (10–40 MB), and it
// allocates at the rate of its traffic: every request, message and batch
// is short-lived garbage. With GOGC=100 the collector then runs every few
// MB of allocation, hundreds of times for 20,000 webhooks, and takes
// about a fifth of the process's CPU (with the write barrier and assists
// it turns on). A larger GOGC fixes that, but as a multiplier it also
// multiplies a large live heap, which the embedded NATS server's
// duplicate tracking makes at high rates (~140 B per message id and
// stream, held for the duplicate window). Headroom as an amount of memory
// has neither problem: a small heap may grow by Headroom before a
// collection, a heap larger than Headroom gets Go's default.
//
// Anyone who sets GOGC or GOMEMLIMIT has chosen for themselves; the tuner
// then stays off (see [Wanted]).
package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultHeadroom is how far the heap may grow past the live heap before
// a collection: 32 MiB, about what serve's RSS grows by (38 to 72–75 MiB
// in a 20,000-webhook run, with 11 collections instead of 170). 64 MiB
// collected 6 times for no less CPU and 30–50 MiB more RSS.
const DefaultHeadroom = 32 << 20

// maxPercent bounds the percent for a tiny live heap (and a live heap
// that reads as zero before the first collection).
const maxPercent = 2000

// Percent is the GOGC percent that lets a heap of live bytes grow by
// headroom bytes: never below Go's default of 100, at most maxPercent.
func Percent(live, headroom uint64) int {
	if live == 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	return int(min(max(p, 100), maxPercent))
}

// Wanted reports whether the process leaves the collector to hookbridge:
// neither GOGC nor GOMEMLIMIT is set in its environment.
func Wanted(getenv func(string) (string, bool)) bool {
	_, gogc := getenv("GOGC")
	_, limit := getenv("GOMEMLIMIT")
	return !gogc && !limit
}

// Run sets the GOGC percent from the live heap every interval until ctx
// ends, then restores the percent it found.
func Run(ctx context.Context, headroom uint64, interval time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	prev := debug.SetGCPercent(Percent(live(), headroom))
	defer debug.SetGCPercent(prev)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			debug.SetGCPercent(Percent(live(), headroom))
		}
	}
}
