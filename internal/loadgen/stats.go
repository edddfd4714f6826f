package loadgen

import (
	"fmt"
	"slices"
	"sort"
	"time"
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

// summarize sorts ds in place and returns its summary; ds entries <= 0
// (not measured) are ignored.
func summarize(ds []time.Duration) Latency {
	vals := make([]time.Duration, 0, len(ds))
	for _, d := range ds {
		if d > 0 {
			vals = append(vals, d)
		}
	}
	if len(vals) == 0 {
		return Latency{}
	}
	slices.Sort(vals)
	var sum time.Duration
	for _, v := range vals {
		sum += v
	}
	return Latency{
		N:      len(vals),
		MeanMs: ms(sum / time.Duration(len(vals))),
		P50Ms:  ms(quantile(vals, 0.50)),
		P95Ms:  ms(quantile(vals, 0.95)),
		P99Ms:  ms(quantile(vals, 0.99)),
		MaxMs:  ms(vals[len(vals)-1]),
	}
}

// quantile is the nearest-rank quantile of sorted vals.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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
