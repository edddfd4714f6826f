package ops

import (
	"errors"
	"testing"
	"time"
)

func TestAtLeast(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"2.11.0": true, "2.15.2": true, "v2.11.3": true, "3.0.0": true, "2.12.0-beta.1": true,
		"2.10.22": false, "2.9.10": false, "v2.9.10": false, "1.99.0": false, "": false, "garbage": false,
	} {
		if got := atLeast(v, 2, 11); got != want {
			t.Errorf("atLeast(%q, 2, 11) = %v, want %v", v, got, want)
		}
	}
}

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if got, err := ParseWhen("2h", now); err != nil || !got.Equal(now.Add(-2*time.Hour)) {
		t.Fatalf("2h: %v %v", got, err)
	}
	if got, err := ParseWhen("2026-11-30T10:00:00Z", now); err != nil || got.Day() != 30 {
		t.Fatalf("RFC 3339: %v %v", got, err)
	}
	if got, err := ParseWhen("", now); err != nil || !got.IsZero() {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"yesterday", "-2h", "0s"} {
		if _, err := ParseWhen(bad, now); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseWhen(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestConsumerReceives(t *testing.T) {
	t.Parallel()
	c := Consumer{Name: "orders", Sources: []string{"demo"}, EventTypes: []string{"order.paid"}}
	if !c.receives("demo", "order.paid") || c.receives("other", "order.paid") || c.receives("demo", "order.created") || !c.receives("demo", "") {
		t.Fatal("receives does not follow the subscription")
	}
	if !(Consumer{}).receives("any", "any") {
		t.Fatal("a consumer without sources or types receives everything")
	}
}
