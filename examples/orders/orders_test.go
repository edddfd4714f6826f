package orders

import (
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/consumer"
)

func TestOutboxIDFitsAnyEventID(t *testing.T) {
	short := consumer.Event{Source: "demo", ID: "evt-1"}
	if got := outboxID("orders", short); got != "orders:demo:evt-1" {
		t.Fatalf("outboxID = %q", got)
	}
	long := consumer.Event{Source: "demo", ID: strings.Repeat("x", 255)}
	a, b := outboxID("orders", long), outboxID("orders", consumer.Event{Source: "demo", ID: strings.Repeat("y", 255)})
	if len(a) > 255 || a == b || !strings.HasPrefix(a, "orders:demo:sha256:") {
		t.Fatalf("long ids: %q (%d) and %q", a, len(a), b)
	}
	if a != outboxID("orders", long) {
		t.Fatal("outboxID is not stable")
	}
}
