package relay_test

import (
	"testing"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine must stop with its owner (given a minute to stop).
// Two goroutines of the embedded nats-server v2.15.2 are let go: after a
// shutdown that raced a stream's creation (the outage tests stop the
// server while the relay ensures EVENTS), its file store's state flusher
// and the access-time service it holds were seen left behind once in six
// runs under load, with every other goroutine of that server stopped.
func TestMain(m *testing.M) {
	hookbridgetest.VerifyNoLeaks(m,
		"github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop",
		"github.com/nats-io/nats-server/v2/server/ats.Register.func1")
}
