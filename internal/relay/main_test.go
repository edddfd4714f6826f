package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine must stop with its owner.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
