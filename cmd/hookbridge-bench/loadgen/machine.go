package loadgen

import (
	"context"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// ProcessCPU is the CPU time (user + system) this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTimes reads the machine's busy and total CPU seconds (all CPUs)
// from /proc/stat.
func cpuTimes() (busy, total float64, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0, err
	}
	c := st.CPUTotal
	// Guest time is already counted in user time.
	total = c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal
	return total - c.Idle - c.Iowait, total, nil
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
	if t1 <= t0 {
		return 0, nil
	}
	return (b1 - b0) / (t1 - t0), nil
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

// procCPU is the user + system CPU time of process pid (0 when
// unreadable).
func procCPU(pid int) time.Duration {
	st, ok := procStat(pid)
	if !ok {
		return 0
	}
	return time.Duration(st.CPUTime() * float64(time.Second))
}

// procStat reads /proc/<pid>/stat; ok is false when it cannot be read
// (the process gone, or no procfs).
func procStat(pid int) (st procfs.ProcStat, ok bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, false
	}
	st, err = p.Stat()
	if err != nil {
		return procfs.ProcStat{}, false
	}
	return st, true
}
