package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

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
	var logs hookbridgetest.LogBuffer
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
