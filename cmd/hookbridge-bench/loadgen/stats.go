package loadgen

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency summarises a set of latencies; durations are in milliseconds so
// the JSON output is readable as is.
type Latency struct {
	N      int     `json:"n"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P95Ms  float64 `json:"p95_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// latencies collects latencies in an HdrHistogram: constant memory (tens
// of KiB, 3 significant digits from 1 µs to an hour) and constant work
// per sample however long the run, where keeping every sample and sorting
// them grew with the run (a soak at 1,000 events/s keeps millions). Safe
// for concurrent use.
type latencies struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newLatencies() *latencies {
	return &latencies{h: hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)}
}

// record adds one latency (clamped to the histogram's range).
func (l *latencies) record(d time.Duration) {
	us := min(max(d.Microseconds(), 1), l.h.HighestTrackableValue())
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.h.RecordValue(us) // in range by the clamp
}

// summary is the recorded latencies' summary.
func (l *latencies) summary() Latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.h.TotalCount()
	if n == 0 {
		return Latency{}
	}
	usToMs := func(v int64) float64 { return float64(v) / 1000 }
	return Latency{
		N:      int(n),
		MeanMs: l.h.Mean() / 1000,
		P50Ms:  usToMs(l.h.ValueAtQuantile(50)),
		P95Ms:  usToMs(l.h.ValueAtQuantile(95)),
		P99Ms:  usToMs(l.h.ValueAtQuantile(99)),
		MaxMs:  usToMs(l.h.Max()),
	}
}

func (l Latency) String() string {
	if l.N == 0 {
		return "-"
	}
	return fmt.Sprintf("p50 %.2f / p95 %.2f / p99 %.2f / max %.2f ms", l.P50Ms, l.P95Ms, l.P99Ms, l.MaxMs)
}

// Median returns the median of xs (the mean of the middle two for an even
// count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
