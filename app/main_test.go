package app

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine must stop with its owner. Two of nats-server's own are
// let be: a stream's state flusher and the store's access-time ticker
// stop after the embedded server's WaitForShutdown returns (the server
// does not wait for them), which on a loaded machine can be after this
// check; they are the server's, not hookbridge's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}
