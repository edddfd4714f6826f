package bridge_test

import (
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
)

// TestMemoryBudgetMustHoldOneBody: a MaxBodyMemory smaller than one body
// at MaxBodyBytes would answer every such body 503, which senders retry
// forever, although the body is within the limit. New refuses it, naming
// both numbers.
func TestMemoryBudgetMustHoldOneBody(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	_, err := bridge.New(nil, bridge.Options{Sources: []bridge.Source{sc.source(t)}, MaxBodyBytes: 1 << 20, MaxBodyMemory: 512 << 10})
	if err == nil || !strings.Contains(err.Error(), "524288") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("New = %v, want a refusal naming both numbers", err)
	}
	if _, err := bridge.New(nil, bridge.Options{Sources: []bridge.Source{sc.source(t)}, MaxBodyBytes: 1 << 20, MaxBodyMemory: 1<<20 + 1}); err != nil {
		t.Fatalf("a budget of exactly one body: %v", err)
	}
}
