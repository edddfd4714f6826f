package loadgen

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcessCPU is the CPU time (user + system) this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTimes reads the machine's busy and total jiffies from /proc/stat.
func cpuTimes() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, nil
}

// MachineBusy is the fraction of all CPUs busy (any process) over d.
func MachineBusy(ctx context.Context, d time.Duration) (float64, error) {
	b0, t0, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	b1, t1, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	if t1 == t0 {
		return 0, nil
	}
	return float64(b1-b0) / float64(t1-t0), nil
}

// WaitQuiet waits until the machine has been less than threshold busy
// (fraction of all CPUs) for two consecutive seconds, or maxWait passed,
// and returns the last busy fraction seen. On a shared machine it keeps a
// measurement from starting while someone else's build or test holds the
// CPUs; the fraction is reported with each run either way.
func WaitQuiet(ctx context.Context, threshold float64, maxWait time.Duration) (float64, error) {
	deadline := time.Now().Add(maxWait)
	quiet := 0
	for {
		busy, err := MachineBusy(ctx, time.Second)
		if err != nil {
			return 0, err
		}
		if busy < threshold {
			quiet++
		} else {
			quiet = 0
		}
		if quiet >= 2 || !time.Now().Before(deadline) {
			return busy, nil
		}
	}
}

// procCPU is the user + system CPU time of process pid from
// /proc/<pid>/stat (0 when unreadable), assuming the usual 100 clock
// ticks per second.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
