package app

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// keyedConsumerState reads a keyed consumer's state for the metrics: its
// own durable and its partition durables, read in one listing of HOOKS's
// consumers and counted together (as status does), each partition and
// each member on its own, labelled by the consumer.
func (s *Server) keyedConsumerState(ctx context.Context, name string) (metrics.ConsumerState, error) {
	hooks, err := s.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return metrics.ConsumerState{}, fmt.Errorf("stream %s: %w", stream.Hooks, err)
	}
	infos, err := durables.List(ctx, hooks)
	if err != nil {
		return metrics.ConsumerState{}, err
	}
	st := metrics.ConsumerState{Keyed: true}
	own := false
	var its []*jetstream.ConsumerInfo
	backlog := map[int]uint64{}
	for _, ci := range infos {
		owner, p := stream.ConsumerOfDurable(ci.Name)
		if owner != name || ci.Config.Durable == "" {
			continue
		}
		own = own || p < 0
		its = append(its, ci)
		if p >= 0 {
			st.Partitions = append(st.Partitions, partitionState(ci, p))
			backlog[p] = ci.NumPending + uint64(ci.NumAckPending)
		}
	}
	if !own {
		return metrics.ConsumerState{}, fmt.Errorf("durable consumer %s: %w", name, jetstream.ErrConsumerNotFound)
	}
	sums := durables.Sum(its)
	st.Pending, st.AckPending, st.Redelivered, st.Paused = sums.Pending, sums.AckPending, sums.Redelivered, sums.Paused
	if sums.Busy() {
		if st.OldestUnacked, err = durables.OldestUnacked(ctx, s.js, its); err != nil {
			return metrics.ConsumerState{}, err
		}
	}
	members, err := engine.Members(ctx, s.js, name)
	if err != nil {
		return metrics.ConsumerState{}, err
	}
	for _, m := range members {
		ms := metrics.MemberState{ID: m.ID, Host: m.Host, Partitions: len(m.Partitions)}
		for _, p := range m.Partitions {
			ms.Backlog += backlog[p]
		}
		st.Members = append(st.Members, ms)
	}
	return st, nil
}

func partitionState(ci *jetstream.ConsumerInfo, p int) metrics.PartitionState {
	return metrics.PartitionState{Partition: p, Pending: ci.NumPending, AckPending: ci.NumAckPending, Pinned: durables.Pinned(ci)}
}
