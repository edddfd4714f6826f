package cli

import (
	"os"
	"testing"

	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// asHookbridge, set in its environment, makes the test binary the
// hookbridge binary (cmd/hookbridge's main: [Main] with the built-in
// handlers), so that the README test runs the README's commands in
// processes of their own without building one.
const asHookbridge = "HOOKBRIDGE_README_RUN_AS_MAIN"

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine must stop with its owner (given a minute to stop).
func TestMain(m *testing.M) {
	if os.Getenv(asHookbridge) == "1" {
		os.Exit(Main(os.Args[1:], builtin.Handlers()))
	}
	hookbridgetest.VerifyNoLeaks(m)
}
