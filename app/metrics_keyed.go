package app

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

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
	infos, err := listConsumers(ctx, hooks)
	if err != nil {
		return metrics.ConsumerState{}, err
	}
	st := metrics.ConsumerState{Keyed: true}
	own := false
	var durables []*jetstream.ConsumerInfo
	backlog := map[int]uint64{}
	for _, ci := range infos {
		owner, p := stream.ConsumerOfDurable(ci.Name)
		if owner != name || ci.Config.Durable == "" {
			continue
		}
		own = own || p < 0
		durables = append(durables, ci)
		if p >= 0 {
			st.Partitions = append(st.Partitions, partitionState(ci, p))
			backlog[p] = ci.NumPending + uint64(ci.NumAckPending)
		}
	}
	if !own {
		return metrics.ConsumerState{}, fmt.Errorf("durable consumer %s: %w", name, jetstream.ErrConsumerNotFound)
	}
	sums := sumDurables(durables)
	st.Pending, st.AckPending, st.Redelivered, st.Paused = sums.pending, sums.ackPending, sums.redelivered, sums.paused
	if sums.pending > 0 || sums.ackPending > 0 {
		if st.OldestUnacked, err = oldestUnacked(ctx, s.js, durables); err != nil {
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
	ps := metrics.PartitionState{Partition: p, Pending: ci.NumPending, AckPending: ci.NumAckPending}
	for _, g := range ci.PriorityGroups {
		ps.Pinned = ps.Pinned || g.PinnedClientID != ""
	}
	return ps
}
