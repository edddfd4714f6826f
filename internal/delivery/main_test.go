package delivery_test

import (
	"testing"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestMain fails the package if any test leaves a goroutine running.
func TestMain(m *testing.M) {
	hookbridgetest.VerifyNoLeaks(m)
}
