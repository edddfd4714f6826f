// Package gctune gives the garbage collector of a serve process a fixed
// amount of headroom over the live heap, instead of Go's default of
// doubling it.
//
// serve's live heap is small when NATS is external (3–10 MB), and it
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
// Anyone who sets GOGC or GOMEMLIMIT, in the environment or in code, has
// chosen for themselves; the tuner then stays off (see [Wanted]).
package gctune

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// DefaultHeadroom is how far the heap may grow past the live heap before
// a collection: 32 MiB, about what serve's RSS grows by (38 to 64–66 MiB
// in a 20,000-webhook run, with 14–15 collections instead of 170). 64 MiB
// collected 6 times for no less CPU and 30–50 MiB more RSS.
const DefaultHeadroom = 32 << 20

// minHeap is the Go runtime's smallest heap goal at GOGC=100, which it
// scales with the percent: at GOGC=p no collection starts before the heap
// reaches minHeap × p/100, however small the live heap.
const minHeap = 4 << 20

// Percent is the GOGC percent that lets a heap of live bytes grow by
// headroom bytes: never below Go's default of 100, and never so high that
// the runtime's scaled minimum heap exceeds headroom (a tiny live heap,
// or one that reads as zero before the first collection).
func Percent(live, headroom uint64) int {
	limit := max(headroom*100/minHeap, 100)
	if live == 0 {
		return int(limit)
	}
	return int(min(max(headroom*100/live, 100), limit))
}

// Wanted reports whether the process leaves the collector to hookbridge:
// neither GOGC nor GOMEMLIMIT is set in its environment, and nothing
// (a program embedding hookbridge's commands, say) has set a percent
// other than Go's default or a memory limit in code. While a tuner is
// active its own percent counts as the default.
func Wanted(getenv func(string) (string, bool)) bool {
	if _, gogc := getenv("GOGC"); gogc {
		return false
	}
	if _, limit := getenv("GOMEMLIMIT"); limit {
		return false
	}
	if debug.SetMemoryLimit(-1) != math.MaxInt64 { // -1 reads it
		return false
	}
	active.Lock()
	defer active.Unlock()
	return active.runs > 0 || read("/gc/gogc:percent") == 100
}

// active counts the tuners in this process: the percent is the process's,
// so the first saves the one it finds and the last one restores it.
var active struct {
	sync.Mutex
	runs  int
	saved int
}

// Start sets the GOGC percent from the live heap now and then every
// interval, in a goroutine of its own, until ctx ends. The returned
// function waits for that goroutine to end. When the last tuner in the
// process ends it restores the percent the first one found.
func Start(ctx context.Context, headroom uint64, interval time.Duration) (wait func()) {
	percent := func() int { return Percent(read("/gc/heap/live:bytes"), headroom) }
	active.Lock()
	if prev := debug.SetGCPercent(percent()); active.runs == 0 {
		active.saved = prev
	}
	active.runs++
	active.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			active.Lock()
			defer active.Unlock()
			if active.runs--; active.runs == 0 {
				debug.SetGCPercent(active.saved)
			}
		}()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				p := percent()
				active.Lock()
				if uint64(p) != read("/gc/gogc:percent") { // the live heap seldom moves it
					debug.SetGCPercent(p)
				}
				active.Unlock()
			}
		}
	}()
	return func() { <-done }
}

// read returns a uint64 runtime metric, 0 if it is not one.
func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
