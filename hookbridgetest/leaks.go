package hookbridgetest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakSettle is how long [VerifyNoLeaks] gives the goroutines of the
// tests to stop. goleak alone looks for about half a second; goroutines
// stopping as their owners return (a server's, a client's) can take
// seconds on a loaded machine.
const leakSettle = time.Minute

// VerifyNoLeaks runs a package's tests and fails the run when a goroutine
// is still running after them: every goroutine must stop with its owner.
// Call it as the package's TestMain:
//
//	func TestMain(m *testing.M) { hookbridgetest.VerifyNoLeaks(m) }
//
// It looks again until no goroutine is left or a minute has passed, and
// then reports those left. ignoreTopFunctions names goroutines let be, by
// the function at the top of their stack (as goleak.IgnoreTopFunction).
func VerifyNoLeaks(m *testing.M, ignoreTopFunctions ...string) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(ignoreTopFunctions); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks asks goleak until it finds no goroutine or leakSettle passes,
// and returns its last answer.
func findLeaks(ignoreTopFunctions []string) error {
	var opts []goleak.Option
	for _, f := range ignoreTopFunctions {
		opts = append(opts, goleak.IgnoreTopFunction(f))
	}
	deadline := time.Now().Add(leakSettle)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
