package durables_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/durables"
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
	if age, err := durables.OldestUnacked(ctx, j.JS, durableAt(0)); err != nil || age != 0 {
		t.Fatalf("empty stream: %v, %v; want 0", age, err)
	}
	j.PublishHook(t, "demo", "e-1", "order.created", orders.WebhookBody("order.created", "o-1", 1))
	time.Sleep(300 * time.Millisecond) // the first message is at least this much older
	second := time.Now()
	j.PublishHook(t, "demo", "e-2", "order.created", orders.WebhookBody("order.created", "o-2", 1))
	if age, err := durables.OldestUnacked(ctx, j.JS, durableAt(0)); err != nil || age < 300*time.Millisecond {
		t.Fatalf("nothing acked: %v, %v; want the first message's age, ≥ 300ms", age, err)
	}
	// The second message is no older than the time since its publish
	// began (however long a loaded machine takes), the first is older by
	// 300ms more.
	age, err := durables.OldestUnacked(ctx, j.JS, durableAt(1))
	if bound := time.Since(second); err != nil || age > bound {
		t.Fatalf("first acked: %v, %v; want the second message's age, ≤ %s", age, err, bound)
	}
	if age, err := durables.OldestUnacked(ctx, j.JS, durableAt(2)); err != nil || age != 0 {
		t.Fatalf("all acked: %v, %v; want 0", age, err)
	}
}

// durableAt is a durable of every subject with work (a pending message)
// past ack floor floor, as JetStream would report it.
func durableAt(floor uint64) []*jetstream.ConsumerInfo {
	return []*jetstream.ConsumerInfo{{Name: "d", NumPending: 1, AckFloor: jetstream.SequenceInfo{Stream: floor}}}
}

// A keyed consumer's figures are its durables' together: sums, the
// lowest floor among those with work (the highest when none has any),
// the last delivery of any, and paused when one is.
func TestSum(t *testing.T) {
	t.Parallel()
	info := func(pending uint64, ackPending, redelivered int, floor, delivered uint64, paused bool) *jetstream.ConsumerInfo {
		return &jetstream.ConsumerInfo{NumPending: pending, NumAckPending: ackPending, NumRedelivered: redelivered,
			AckFloor: jetstream.SequenceInfo{Stream: floor}, Delivered: jetstream.SequenceInfo{Stream: delivered}, Paused: paused}
	}
	busy := durables.Sum([]*jetstream.ConsumerInfo{info(0, 0, 0, 0, 0, false), info(2, 1, 1, 40, 44, false), info(0, 1, 0, 30, 31, true), info(0, 0, 0, 90, 90, false)})
	if want := (durables.Sums{Pending: 2, AckPending: 2, Redelivered: 1, AckFloor: 30, Delivered: 90, Paused: true}); busy != want || !busy.Busy() {
		t.Errorf("busy: %+v, want %+v", busy, want)
	}
	idle := durables.Sum([]*jetstream.ConsumerInfo{info(0, 0, 0, 0, 0, false), info(0, 0, 0, 57, 57, false)})
	if want := (durables.Sums{AckFloor: 57, Delivered: 57}); idle != want || idle.Busy() {
		t.Errorf("idle: %+v, want %+v (the last message acked, not a partition's 0)", idle, want)
	}
}

// The one orphan rule: a durable no configured consumer owns, by its own
// name or as a partition durable; never an ephemeral consumer or a
// replay's.
func TestOrphaned(t *testing.T) {
	t.Parallel()
	ci := func(name string, durable bool) *jetstream.ConsumerInfo {
		c := &jetstream.ConsumerInfo{Name: name}
		if durable {
			c.Config.Durable = name
		}
		return c
	}
	configured := []string{"orders"}
	all := []*jetstream.ConsumerInfo{
		ci("orders", true), ci(stream.PartitionDurable("orders", 3), true), // configured
		ci("old", true), ci(stream.PartitionDurable("gone", 1), true), ci("not~a~name", true), // orphans
		ci("ephemeral", false), ci(durables.ReplayPrefix+"orders_x", true), // not durables of the deployment
	}
	want := []string{"gone~p01", "not~a~name", "old"}
	if got := durables.Orphans(all, configured); !slices.Equal(got, want) {
		t.Errorf("orphans %v, want %v", got, want)
	}
}
