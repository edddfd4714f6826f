package app

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestOldestUnackedAge reads the age of the first HOOKS message after an
// ack floor: the figure operators alert on before max_age deletes
// unapplied messages.
func TestOldestUnackedAge(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	if err := stream.EnsureIngress(context.Background(), j.JS, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if age, err := oldestUnacked(ctx, j.JS, 0); err != nil || age != 0 {
		t.Fatalf("empty stream: %v, %v; want 0", age, err)
	}
	j.PublishHook(t, "demo", "e-1", "order.created", orders.WebhookBody("order.created", "o-1", 1))
	time.Sleep(300 * time.Millisecond)
	j.PublishHook(t, "demo", "e-2", "order.created", orders.WebhookBody("order.created", "o-2", 1))
	if age, err := oldestUnacked(ctx, j.JS, 0); err != nil || age < 300*time.Millisecond {
		t.Fatalf("nothing acked: %v, %v; want the first message's age, ≥ 300ms", age, err)
	}
	if age, err := oldestUnacked(ctx, j.JS, 1); err != nil || age >= 300*time.Millisecond {
		t.Fatalf("first acked: %v, %v; want the second message's age, < 300ms", age, err)
	}
	if age, err := oldestUnacked(ctx, j.JS, 2); err != nil || age != 0 {
		t.Fatalf("all acked: %v, %v; want 0", age, err)
	}
}

// ackUpTo creates durable name on HOOKS and acks its first n messages.
func ackUpTo(t *testing.T, j *hookbridgetest.JetStream, name string, n int) {
	t.Helper()
	ctx := context.Background()
	c, err := j.JS.CreateOrUpdateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return
	}
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != n {
		t.Fatalf("%s: fetched %d, want %d", name, got, n)
	}
}

// TestTrimNeverPassesTheLowestAckFloor: with publishes refused, the
// guard purges exactly the messages every consumer has acked, and
// nothing while a configured consumer has no durable yet or none exists.
func TestTrimNeverPassesTheLowestAckFloor(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	ctx := context.Background()
	if err := stream.EnsureIngress(ctx, j.JS, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Ensure(ctx, j.JS, stream.EventsConfig(stream.Options{})); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		j.PublishHook(t, "demo", fmt.Sprint("e-", i), "order.created", orders.WebhookBody("order.created", fmt.Sprint("o-", i), 1))
	}
	refused := errors.New("insufficient resources")
	g := &storeGuard{js: j.JS, log: quietLogger(), consumers: []string{"a", "b"}, refused: func() error { return refused }}
	first := func() uint64 { return streamInfo(t, j.JS, stream.Hooks).State.FirstSeq }

	if err := g.check(ctx); err != nil || first() != 1 {
		t.Fatalf("no consumer yet: err %v, first seq %d; want nothing purged", err, first())
	}
	if g.hooksRoom(ctx) == nil {
		t.Fatal("publishes refused and nothing trimmed, yet HOOKS reported as having room")
	}
	ackUpTo(t, j, "a", 60)
	if err := g.check(ctx); err != nil || first() != 1 {
		t.Fatalf("consumer b has no durable yet: err %v, first seq %d; want nothing purged", err, first())
	}
	ackUpTo(t, j, "b", 30)
	if err := g.check(ctx); err != nil || first() != 31 {
		t.Fatalf("ack floors 60 and 30: err %v, first seq %d; want 31", err, first())
	}
	if n := streamInfo(t, j.JS, stream.Hooks).State.Msgs; n != 70 {
		t.Fatalf("%d messages left, want the 70 consumer b has not acked", n)
	}
	// Readiness follows the ingress's own report, which clears itself.
	if g.hooksRoom(ctx) == nil {
		t.Fatal("publishes still refused, yet HOOKS reported as having room")
	}
	refused = nil
	if err := g.hooksRoom(ctx); err != nil {
		t.Fatalf("publishes stored again, yet HOOKS reported full: %v", err)
	}
	// Refused again with nothing more acked: nothing more is purged.
	refused = errors.New("insufficient resources, again")
	if err := g.check(ctx); err != nil || first() != 31 {
		t.Fatalf("refused again: err %v, first seq %d; want 31", err, first())
	}
}
