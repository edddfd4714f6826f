package app

import (
	"testing"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestMain fails the package if any test leaves a goroutine running:
// every goroutine must stop with its owner (given a minute to stop). Two
// of nats-server's own are let be: a stream's state flusher and the
// store's access-time ticker stop after the embedded server's
// WaitForShutdown returns (the server does not wait for them); they are
// the server's, not hookbridge's.
func TestMain(m *testing.M) {
	hookbridgetest.VerifyNoLeaks(m,
		"github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop",
		"github.com/nats-io/nats-server/v2/server/ats.Register.func1",
	)
}
