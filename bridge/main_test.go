package bridge_test

import (
	"testing"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine must stop with its owner (given a minute to stop).
func TestMain(m *testing.M) {
	hookbridgetest.VerifyNoLeaks(m)
}
