package loadgen

import "testing"

// The order log tells a gap, a resend of the latest version (a duplicate
// after a kill) and a resend of an older one (out of order) apart.
func TestOrderLogCounts(t *testing.T) {
	l := &orderLog{latest: map[string]int{}, seen: map[string]map[int]bool{}}
	for _, r := range []struct {
		key string
		v   int
	}{{"a", 1}, {"a", 2}, {"a", 2}, {"b", 1}, {"b", 3}, {"b", 2}, {"a", 3}, {"a", 1}} {
		l.record("e", r.key, r.v)
	}
	// a: 1 2 2(dup) 3 1(dup, older: out of order); b: 1 3(gap) 2(older
	// than the latest: out of order).
	if l.received != 6 || l.duplicates != 2 || l.outOfOrder != 3 {
		t.Fatalf("received %d, duplicates %d, out of order %d; want 6, 2, 3", l.received, l.duplicates, l.outOfOrder)
	}
}
