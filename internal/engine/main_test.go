package engine_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine the runner starts must stop with its context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
