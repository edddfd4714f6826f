package app

import (
	"context"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/internal/testenv"
)

// TestOldestUnackedAge reads the age of the first HOOKS message after an
// ack floor: the figure operators alert on before max_age deletes
// unapplied messages.
func TestOldestUnackedAge(t *testing.T) {
	t.Parallel()
	j := testenv.NATS(t)
	if err := stream.EnsureIngress(context.Background(), j.JS, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if age, err := oldestUnacked(ctx, j.JS, 0); err != nil || age != 0 {
		t.Fatalf("empty stream: %v, %v; want 0", age, err)
	}
	j.PublishHook(t, "demo", "e-1", "order.created", testenv.OrderBody("order.created", "o-1", 1))
	time.Sleep(300 * time.Millisecond)
	j.PublishHook(t, "demo", "e-2", "order.created", testenv.OrderBody("order.created", "o-2", 1))
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
