package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCleanShutdownLogsNoDisconnect stops a serve connected to an external
// NATS server: closing the connection on purpose is not a disconnect
// worth a warning.
func TestCleanShutdownLogsNoDisconnect(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.NATSURL = j.URL()
		c.Consumers = []ConsumerConfig{}
	})
	var logs syncBuffer
	srv, err := NewServer(cfg, ordersHandlers(), []string{RoleIngress}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(string) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "disconnected") {
		t.Fatalf("clean shutdown logged a disconnect:\n%s", logs.String())
	}
}
