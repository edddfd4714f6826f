package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A keyed consumer's partitions and members are series of the consumer,
// labelled by partition number and member; an unkeyed consumer has none.
func TestKeyedConsumerSeries(t *testing.T) {
	t.Parallel()
	r := New()
	info := func(_ context.Context, name string) (ConsumerState, error) {
		if name != "orders" {
			return ConsumerState{Pending: 3}, nil
		}
		return ConsumerState{Pending: 5, AckPending: 1, Paused: true, Keyed: true,
			Partitions: []PartitionState{{Partition: 0, Pending: 5, Pinned: true}, {Partition: 1, AckPending: 1}},
			Members:    []MemberState{{ID: "m1", Host: "host-a", Partitions: 2, Backlog: 6}},
		}, nil
	}
	if err := r.Register(NewConsumerCollector([]string{"orders", "plain"}, info, 0)); err != nil {
		t.Fatal(err)
	}
	expected := `
# HELP hookbridge_consumer_member_backlog Messages of the partitions a member serves not applied yet (pending and ack pending): its lag.
# TYPE hookbridge_consumer_member_backlog gauge
hookbridge_consumer_member_backlog{consumer="orders",host="host-a",member="m1"} 6
# HELP hookbridge_consumer_members Instances running a keyed consumer now (live member keys).
# TYPE hookbridge_consumer_members gauge
hookbridge_consumer_members{consumer="orders"} 1
# HELP hookbridge_consumer_partition_pending Messages of a keyed consumer's partition not delivered yet (its durable's num_pending).
# TYPE hookbridge_consumer_partition_pending gauge
hookbridge_consumer_partition_pending{consumer="orders",partition="0"} 5
hookbridge_consumer_partition_pending{consumer="orders",partition="1"} 0
# HELP hookbridge_consumer_partition_pinned 1 while an instance holds the partition's pin, else 0; with a backlog and no pin nobody applies the partition.
# TYPE hookbridge_consumer_partition_pinned gauge
hookbridge_consumer_partition_pinned{consumer="orders",partition="0"} 1
hookbridge_consumer_partition_pinned{consumer="orders",partition="1"} 0
# HELP hookbridge_consumer_partitions Partitions a keyed consumer reads (one durable each).
# TYPE hookbridge_consumer_partitions gauge
hookbridge_consumer_partitions{consumer="orders"} 2
# HELP hookbridge_consumer_paused 1 while an operator has paused the consumer (its messages wait in HOOKS), else 0.
# TYPE hookbridge_consumer_paused gauge
hookbridge_consumer_paused{consumer="orders"} 1
hookbridge_consumer_paused{consumer="plain"} 0
`
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(expected),
		"hookbridge_consumer_member_backlog", "hookbridge_consumer_members", "hookbridge_consumer_partition_pending",
		"hookbridge_consumer_partition_pinned", "hookbridge_consumer_partitions", "hookbridge_consumer_paused"); err != nil {
		t.Fatal(err)
	}
}
