package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// ackEvents creates durable name on EVENTS (pausing it when paused, as a
// disabled endpoint's is) and acks its first n messages.
func ackEvents(t *testing.T, j *hookbridgetest.JetStream, name string, n int) {
	t.Helper()
	ctx := context.Background()
	c, err := j.JS.CreateOrUpdateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
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

// TestEventsTrimKeepsWhatAnEndpointNeeds: with delivery endpoints, the
// guard trims EVENTS by age only below every endpoint durable's ack
// floor and below the lowest sequence a pending delivery in Postgres
// reads; nothing while an endpoint's durable does not exist yet.
func TestEventsTrimKeepsWhatAnEndpointNeeds(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	o := stream.Options{Delivery: true}
	if cfg := stream.EventsConfig(o); cfg.MaxAge != 0 || cfg.MaxBytes != stream.FallbackEventsMaxBytes {
		t.Fatalf("EVENTS with endpoints: max age %v, max bytes %d; want none and %d", cfg.MaxAge, cfg.MaxBytes, stream.FallbackEventsMaxBytes)
	}
	if err := stream.EnsureIngress(ctx, j.JS, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stream.EnsureEvents(ctx, j.JS, stream.Options{Delivery: true, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		if _, err := j.JS.Publish(ctx, "events.orders.created", fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	g := &storeGuard{js: j.JS, log: quietLogger(), maxAge: time.Millisecond,
		events: &eventsGuard{durables: []string{"delivery_a", "delivery_b"},
			pending: func(ctx context.Context) (uint64, bool, error) { return delivery.EventsFloor(ctx, db.Pool) }}}
	first := func() uint64 { return streamInfo(t, j.JS, stream.Events).State.FirstSeq }
	// Every message is older than the 1 ms horizon once a millisecond has
	// passed: wait for that state before each look.
	hookbridgetest.Eventually(t, time.Minute, "the events to pass max_age", func() bool {
		return time.Since(streamInfo(t, j.JS, stream.Events).State.LastTime) > 10*time.Millisecond
	})

	ackEvents(t, j, "delivery_a", 80)
	if err := g.check(ctx); err != nil || first() != 1 {
		t.Fatalf("delivery_b has no durable yet: err %v, first seq %d; want nothing purged", err, first())
	}
	ackEvents(t, j, "delivery_b", 60)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO hookbridge.delivery_pending (endpoint, stream_seq, event_id, subject, next_attempt_at, origin)
		VALUES ('a', 40, 'e-40', 'events.orders.created', 'infinity', 'parked')`); err != nil {
		t.Fatal(err)
	}
	if err := g.check(ctx); err != nil || first() != 40 {
		t.Fatalf("ack floors 80 and 60, a pending delivery of seq 40: err %v, first seq %d; want 40", err, first())
	}
	// b is disabled: its durable paused, its floor stays where it is.
	if _, err := j.JS.PauseConsumer(ctx, stream.Events, "delivery_b", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM hookbridge.delivery_pending`); err != nil {
		t.Fatal(err)
	}
	if err := g.check(ctx); err != nil || first() != 61 {
		t.Fatalf("pending delivery done, delivery_b (paused) acked 60: err %v, first seq %d; want 61", err, first())
	}
	if err := g.check(ctx); err != nil || first() != 61 {
		t.Fatalf("a second look: err %v, first seq %d; want still 61", err, first())
	}
	if got := streamInfo(t, j.JS, stream.Events).State.Msgs; got != n-60 {
		t.Fatalf("EVENTS holds %d events, want the %d delivery_b has not received", got, n-60)
	}
}
