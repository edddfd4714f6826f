package gctune_test

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/gctune"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 32 * mib, 800},         // before the first collection: 4 MiB × 8 = 32 MiB
		{1 * mib, 32 * mib, 800},   // capped the same way
		{8 * mib, 32 * mib, 400},   // may grow by 32 MiB
		{32 * mib, 32 * mib, 100},  // Go's default from here on
		{512 * mib, 32 * mib, 100}, // never below it
		{1 * mib, 1 * mib, 100},    // a headroom under 4 MiB is Go's default
	} {
		if got := gctune.Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

func TestWanted(t *testing.T) {
	env := func(set ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for _, s := range set {
				if s == k {
					return "1", true
				}
			}
			return "", false
		}
	}
	if !gctune.Wanted(env()) {
		t.Error("not wanted with neither GOGC nor GOMEMLIMIT set")
	}
	if gctune.Wanted(env("GOGC")) || gctune.Wanted(env("GOMEMLIMIT")) {
		t.Error("wanted although the environment chose")
	}
	// A program embedding the commands may have chosen in code.
	prev := debug.SetGCPercent(150)
	wanted := gctune.Wanted(env())
	debug.SetGCPercent(prev)
	if wanted {
		t.Error("wanted although the program set a percent")
	}
	limit := debug.SetMemoryLimit(1 << 40)
	wanted = gctune.Wanted(env())
	debug.SetMemoryLimit(limit)
	if wanted {
		t.Error("wanted although the program set a memory limit")
	}
}

// Two serve commands in one process (tests do that): the percent stays
// tuned until the last tuner ends, then the one found before is back.
func TestConcurrentTunersRestoreTheFirstPercent(t *testing.T) {
	before := debug.SetGCPercent(123)
	defer debug.SetGCPercent(before)
	start := func() (context.CancelFunc, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		return cancel, gctune.Start(ctx, 80<<20, time.Millisecond)
	}
	stopA, waitA := start()
	waitTuned(t)
	stopB, waitB := start()
	stopA()
	waitA()
	if p := percent(); p == 123 {
		t.Fatal("percent back to 123 after the first of two tuners ended, want it still tuned")
	}
	stopB()
	waitB()
	if p := percent(); p != 123 {
		t.Fatalf("percent %d after both tuners, want 123 restored", p)
	}
}

// waitTuned waits until the percent is no longer the 123 the test set:
// with 80 MiB of headroom a tuner sets at least 100 × 80 / (live MiB),
// far above it for a test's heap.
func waitTuned(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for percent() == 123 {
		if time.Now().After(deadline) {
			t.Fatal("percent still 123, want a tuner's")
		}
		time.Sleep(time.Millisecond)
	}
}

// A tuner changes the process's percent while it runs and puts back the
// one it found.
func TestRunRestoresThePercent(t *testing.T) {
	before := debug.SetGCPercent(123)
	defer debug.SetGCPercent(before)
	ctx, cancel := context.WithCancel(context.Background())
	wait := gctune.Start(ctx, 80<<20, time.Millisecond)
	waitTuned(t)
	cancel()
	wait()
	if p := percent(); p != 123 {
		t.Fatalf("percent %d after the tuner ended, want 123 restored", p)
	}
}

// percent reads the GOGC percent without setting it.
func percent() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
