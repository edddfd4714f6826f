package admin_test

import (
	"net/http"
	"testing"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The admin API finds a keyed event that no consumer has applied yet on
// its partition's subject, pending at the consumer, rather than
// answering 404.
func TestEventLifeOfAPendingKeyedEvent(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	seq := e.ns.PublishKeyedHook(t, "demo", "k1", orders.Created, "o-1", orders.WebhookBody(orders.Created, "o-1", 100))
	subject := stream.KeyedHookSubject(stream.Partition(stream.OrderingKeyHeader("o-1"), stream.DefaultPartitions), "demo", orders.Created)
	var life ops.EventLife
	e.mustCall(t, "GET", "/api/v1/events/demo/k1", nil, http.StatusOK, &life)
	if life.Stored == nil || life.Stored.Seq != seq || life.Stored.Subject != subject {
		t.Fatalf("stored = %+v, want seq %d on %s", life.Stored, seq, subject)
	}
	if len(life.Consumers) != 1 || life.Consumers[0].Name != "orders" || life.Consumers[0].State != ops.EventPending ||
		life.Consumers[0].StreamSeq != seq {
		t.Fatalf("consumers = %+v, want orders pending at seq %d", life.Consumers, seq)
	}
}
