package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// A keyed consumer reads each partition of HOOKS's keyed messages through
// a durable of its own, served by one of the instances running the
// consumer (its members) at a time. Its series carry the consumer's name
// and the partition number or the member, so a partition durable never
// shows up as a consumer of its own.

// PartitionState is one partition durable of a keyed consumer.
type PartitionState struct {
	Partition  int
	Pending    uint64
	AckPending int
	// Pinned says whether an instance holds the partition's pin: from its
	// first delivery to an instance until that instance stops pulling. A
	// partition with a backlog and no pin is applied by nobody.
	Pinned bool
}

// MemberState is one instance serving a keyed consumer.
type MemberState struct {
	ID   string
	Host string
	// Partitions is how many partitions it serves; Backlog the messages
	// of those partitions not applied yet (pending and ack pending).
	Partitions int
	Backlog    uint64
}

var (
	descKeyedPartitions = prometheus.NewDesc(Namespace+"_consumer_partitions",
		"Partitions a keyed consumer reads (one durable each).", []string{"consumer"}, nil)
	descKeyedMembers = prometheus.NewDesc(Namespace+"_consumer_members",
		"Instances running a keyed consumer now (live member keys).", []string{"consumer"}, nil)
	descPartitionPending = prometheus.NewDesc(Namespace+"_consumer_partition_pending",
		"Messages of a keyed consumer's partition not delivered yet (its durable's num_pending).", []string{"consumer", "partition"}, nil)
	descPartitionAckPending = prometheus.NewDesc(Namespace+"_consumer_partition_ack_pending",
		"Messages of a keyed consumer's partition delivered and not acked yet.", []string{"consumer", "partition"}, nil)
	descPartitionPinned = prometheus.NewDesc(Namespace+"_consumer_partition_pinned",
		"1 while an instance holds the partition's pin, else 0; with a backlog and no pin nobody applies the partition.", []string{"consumer", "partition"}, nil)
	descMemberBacklog = prometheus.NewDesc(Namespace+"_consumer_member_backlog",
		"Messages of the partitions a member serves not applied yet (pending and ack pending): its lag.", []string{"consumer", "member", "host"}, nil)
	descMemberPartitions = prometheus.NewDesc(Namespace+"_consumer_member_partitions",
		"Partitions a member of a keyed consumer serves.", []string{"consumer", "member", "host"}, nil)
)

func describeKeyed(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKeyedPartitions, descKeyedMembers, descPartitionPending, descPartitionAckPending,
		descPartitionPinned, descMemberBacklog, descMemberPartitions} {
		ch <- d
	}
}

func collectKeyed(ch chan<- prometheus.Metric, consumer string, st ConsumerState) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{consumer}, labels...)...)
	}
	gauge(descKeyedPartitions, float64(len(st.Partitions)))
	gauge(descKeyedMembers, float64(len(st.Members)))
	for _, p := range st.Partitions {
		part := strconv.Itoa(p.Partition)
		gauge(descPartitionPending, float64(p.Pending), part)
		gauge(descPartitionAckPending, float64(p.AckPending), part)
		gauge(descPartitionPinned, boolValue(p.Pinned), part)
	}
	for _, m := range st.Members {
		gauge(descMemberBacklog, float64(m.Backlog), m.ID, m.Host)
		gauge(descMemberPartitions, float64(m.Partitions), m.ID, m.Host)
	}
}
