package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// With a single member nothing is ever held elsewhere: its takeovers (at
// start, and after a restart with messages on their way) open at the
// first look, and it never gates a key for messages "another member
// held", under steady traffic.
func TestSingleMemberNeverWaitsForAnotherMember(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	var logs hookbridgetest.LogBuffer
	start := func() func() {
		c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "srckey", EventTypes: []string{"version.set"}, Handler: sourceKeyHandler{},
			Partitions: stream.DefaultPartitions, BatchSize: 16, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = c.Run(ctx); close(done) }()
		return func() { cancel(); <-done }
	}
	stop := start()
	const n = 2000
	for i := range n {
		if i == n/2 {
			stop() // a restart under traffic: what it held is nak'd, then taken over by itself
			stop = start()
		}
		publishVersion(t, ns, "demo", fmt.Sprintf("e%d", i), fmt.Sprintf("k%d", i%97), i, "")
	}
	t.Cleanup(func() { stop() })
	hookbridgetest.Eventually(t, 2*time.Minute, "every event applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == n
	})
	if len(logs.Lines("consumer partitions assigned")) < 2 {
		t.Fatalf("the logger saw no start:\n%s", logs.String())
	}
	if held := logs.Lines("another member held"); len(held) > 0 {
		t.Fatalf("a single member waited for messages another member held:\n%s", held[0])
	}
}
