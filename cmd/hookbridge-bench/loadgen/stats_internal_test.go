package loadgen

import (
	"math"
	"testing"
	"time"
)

// TestLatencyPercentiles records 1..10,000 ms and expects the
// histogram's percentiles within its 3 significant digits.
func TestLatencyPercentiles(t *testing.T) {
	t.Parallel()
	l := newLatencies()
	for i := 10000; i >= 1; i-- {
		l.record(time.Duration(i) * time.Millisecond)
	}
	s := l.summary()
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", s.P50Ms, 5000}, {"p95", s.P95Ms, 9500}, {"p99", s.P99Ms, 9900}, {"max", s.MaxMs, 10000}, {"mean", s.MeanMs, 5000.5}} {
		if math.Abs(c.got-c.want)/c.want > 0.002 {
			t.Errorf("%s = %.1f ms, want %.1f", c.name, c.got, c.want)
		}
	}
	if s.N != 10000 {
		t.Errorf("n = %d", s.N)
	}
	if (&latencies{h: newLatencies().h}).summary().N != 0 {
		t.Error("empty summary")
	}
}
