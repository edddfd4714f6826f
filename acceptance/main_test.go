package acceptance

import (
	"os"
	"testing"

	"github.com/hookbridge/hookbridge/cli"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// asHookbridge, set in its environment, makes the test binary the
// hookbridge command (cli.Main with the built-in handlers): the
// black-box tests run it as separate serve and command processes.
const asHookbridge = "HOOKBRIDGE_ACCEPTANCE_RUN_AS_MAIN"

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine must stop with its owner (given a minute to stop).
func TestMain(m *testing.M) {
	if os.Getenv(asHookbridge) == "1" {
		os.Exit(cli.Main(os.Args[1:], builtin.Handlers()))
	}
	hookbridgetest.VerifyNoLeaks(m)
}
