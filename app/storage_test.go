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

// ackUpTo creates durable name on HOOKS and acks its first n messages.
func ackUpTo(t *testing.T, j *hookbridgetest.JetStream, name string, n int) {
	t.Helper()
	ackStreamUpTo(t, j, stream.Hooks, name, n)
}

// ackStreamUpTo creates durable name on streamName and acks its first n
// messages.
func ackStreamUpTo(t *testing.T, j *hookbridgetest.JetStream, streamName, name string, n int) {
	t.Helper()
	ctx := context.Background()
	c, err := j.JS.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
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

// ackFiltered creates durable name on HOOKS receiving subject only and
// acks its first n messages.
func ackFiltered(t *testing.T, j *hookbridgetest.JetStream, name, subject string, n int) {
	t.Helper()
	ctx := context.Background()
	c, err := j.JS.CreateOrUpdateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subject})
	if err != nil {
		t.Fatal(err)
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

func publishOrders(t *testing.T, j *hookbridgetest.JetStream, typ, prefix string, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprint(prefix, i)
		j.PublishHook(t, "demo", id, typ, orders.WebhookBody(typ, id, 1))
	}
}

// TestTrimPassesWhatAFilteredConsumerNeverReceives: a consumer of a rare
// event type keeps its ack floor at its last such message while the
// stream grows past it (JetStream moves it only on an ack). The guard
// must not let that floor hold every later message of other types: it
// trims up to the first message the consumer still has to receive.
func TestTrimPassesWhatAFilteredConsumerNeverReceives(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	j.EnsureHooks(t)
	ctx := context.Background()
	if _, err := stream.Ensure(ctx, j.JS, stream.EventsConfig(stream.Options{})); err != nil {
		t.Fatal(err)
	}
	publishOrders(t, j, orders.Paid, "p-", 1)     // seq 1
	publishOrders(t, j, orders.Created, "c-", 20) // seq 2–21
	ackFiltered(t, j, "paid", stream.HookSubject("demo", orders.Paid), 1)
	ackFiltered(t, j, "created", stream.HookSubject("demo", orders.Created), 20)
	refused := errors.New("insufficient resources")
	g := &storeGuard{js: j.JS, log: quietLogger(), consumers: []string{"paid", "created"}, refused: func() error { return refused }}
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	if info := streamInfo(t, j.JS, stream.Hooks); info.State.Msgs != 0 || info.State.FirstSeq != 22 {
		t.Fatalf("every message applied or never to be received: %d left from seq %d; want none, first seq 22", info.State.Msgs, info.State.FirstSeq)
	}
	// A paid order the paid consumer has not received yet holds
	// everything from it on.
	publishOrders(t, j, orders.Paid, "p2-", 1)    // seq 22
	publishOrders(t, j, orders.Created, "c2-", 5) // seq 23–27
	ackFiltered(t, j, "created", stream.HookSubject("demo", orders.Created), 5)
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	if info := streamInfo(t, j.JS, stream.Hooks); info.State.Msgs != 6 || info.State.FirstSeq != 22 {
		t.Fatalf("paid has not received seq 22: %d left from seq %d; want 6 from seq 22", info.State.Msgs, info.State.FirstSeq)
	}
}

// TestAgeHorizonTrimsOnlyAppliedMessages: past max_age the guard deletes
// the messages every consumer has applied and keeps the others, however
// old; messages younger than max_age stay, applied or not. (Whether a
// message was younger than max_age at the check is read from the clock,
// so a stalled machine makes the test check less, never fail.)
func TestAgeHorizonTrimsOnlyAppliedMessages(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	j.EnsureHooks(t)
	ctx := context.Background()
	if _, err := stream.Ensure(ctx, j.JS, stream.EventsConfig(stream.Options{})); err != nil {
		t.Fatal(err)
	}
	const maxAge = 2 * time.Second
	g := &storeGuard{js: j.JS, log: quietLogger(), consumers: []string{"a", "b"}, maxAge: maxAge}
	state := func() (uint64, uint64) {
		st := streamInfo(t, j.JS, stream.Hooks).State
		return st.FirstSeq, st.Msgs
	}
	published := time.Now()
	publishOrders(t, j, orders.Created, "old-", 10)
	ackUpTo(t, j, "a", 10)
	ackUpTo(t, j, "b", 6)
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	if seq, n := state(); time.Since(published) < maxAge && (seq != 1 || n != 10) {
		t.Fatalf("younger than max_age: %d messages from seq %d; want all 10 from 1", n, seq)
	}
	time.Sleep(time.Until(published.Add(maxAge + maxAge/2)))
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	if seq, n := state(); seq != 7 || n != 4 {
		t.Fatalf("past max_age, b applied 6: %d messages from seq %d; want the 4 b has not applied, from 7", n, seq)
	}
	published = time.Now()
	publishOrders(t, j, orders.Created, "new-", 5) // seq 11–15
	ackUpTo(t, j, "a", 5)
	ackUpTo(t, j, "b", 9)
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	seq, n := state()
	if time.Since(published) >= maxAge {
		t.Logf("the machine took %s over the last step: messages 11-15 may be past max_age", time.Since(published))
		if seq < 11 {
			t.Fatalf("all applied and past max_age: first seq %d, want 11 or later", seq)
		}
	} else if seq != 11 || n != 5 {
		t.Fatalf("all applied: %d messages from seq %d; want the 5 younger than max_age, from 11", n, seq)
	}
}

// TestGuardLowersTheByteLimitOnceTheStreamFits: a HOOKS that holds more
// than its new byte bound keeps its old limit (lowering it would delete
// messages on nats-server 2.9); the guard trims what every consumer
// applied and lowers the limit once the rest fits, never dropping an
// unapplied message.
func TestGuardLowersTheByteLimitOnceTheStreamFits(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	ctx := context.Background()
	if _, err := stream.Ensure(ctx, j.JS, stream.EventsConfig(stream.Options{})); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stream.EnsureHooks(ctx, j.JS, stream.Options{MaxBytes: -1}); err != nil {
		t.Fatal(err)
	}
	publishOrders(t, j, orders.Created, "o-", 100)
	info := streamInfo(t, j.JS, stream.Hooks)
	bound := int64(info.State.Bytes / 2)
	ackUpTo(t, j, "a", 10)
	g := &storeGuard{js: j.JS, log: quietLogger(), consumers: []string{"a"}, maxBytes: bound}
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	info = streamInfo(t, j.JS, stream.Hooks)
	if info.State.FirstSeq != 11 || info.State.Msgs != 90 || info.Config.MaxBytes != -1 {
		t.Fatalf("10 applied: %d messages from seq %d, limit %d; want the 90 unapplied kept and no limit yet",
			info.State.Msgs, info.State.FirstSeq, info.Config.MaxBytes)
	}
	ackUpTo(t, j, "a", 80)
	if err := g.check(ctx); err != nil {
		t.Fatal(err)
	}
	info = streamInfo(t, j.JS, stream.Hooks)
	if info.State.FirstSeq > 91 || info.State.Msgs != 100-info.State.FirstSeq+1 || info.Config.MaxBytes != bound {
		t.Fatalf("90 applied: %d messages from seq %d, limit %d; want the 10 unapplied kept and the limit %d",
			info.State.Msgs, info.State.FirstSeq, info.Config.MaxBytes, bound)
	}
}
