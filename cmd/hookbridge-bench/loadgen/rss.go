package loadgen

import (
	"os"
	"sync"
	"time"
)

// RSS is the resident set size of a process sampled over a run, in KiB.
// All zero where /proc is missing.
type RSS struct {
	StartKB int64 `json:"start_kb"`
	PeakKB  int64 `json:"peak_kb"`
	EndKB   int64 `json:"end_kb"`
	Samples int   `json:"samples"`
	// Of says whose: "this process" or "pid N".
	Of string `json:"of"`
}

// ReadRSS returns the resident set of this process in KiB (0 when
// unavailable).
func ReadRSS() int64 { return ReadPIDRSS(os.Getpid()) }

// ReadPIDRSS returns the resident set of process pid in KiB (0 when
// unavailable).
func ReadPIDRSS(pid int) int64 {
	st, ok := procStat(pid)
	if !ok {
		return 0
	}
	return int64(st.ResidentMemory()) / 1024
}

// rssSampler samples VmRSS every interval until stopped.
type rssSampler struct {
	read func() int64
	mu   sync.Mutex
	rss  RSS
	stop chan struct{}
	done chan struct{}
}

func startRSS(interval time.Duration) *rssSampler { return startRSSOf(ReadRSS, interval) }

func startRSSOf(read func() int64, interval time.Duration) *rssSampler {
	s := &rssSampler{read: read, stop: make(chan struct{}), done: make(chan struct{})}
	first := read()
	s.rss = RSS{StartKB: first, PeakKB: first, EndKB: first, Samples: 1, Of: "this process"}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	v := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rss.Samples++
	s.rss.EndKB = v
	s.rss.PeakKB = max(s.rss.PeakKB, v)
}

// finish takes a last sample and returns the figures.
func (s *rssSampler) finish() RSS {
	close(s.stop)
	<-s.done
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss
}
