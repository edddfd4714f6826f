// Package durables reads HOOKS's durable consumers the one way every view
// of them uses: status (the command line, the admin API and the
// console), the metrics, readiness and the storage guard. A consumer is
// its own durable and, when its sources have an ordering key, one
// durable per partition; its figures are theirs together
// (docs/OPERATIONS.md, "Keyed consumers"). A durable no configured
// consumer owns is an orphan ([Orphaned]).
package durables

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// ReplayPrefix begins the names of the ephemeral consumers that replays
// and event look-ups create on HOOKS: they go by themselves and are not
// part of the deployment's state.
const ReplayPrefix = "hookbridge_replay_"

// List reads every consumer of s (HOOKS, or another stream for status),
// durable or not (a running replay counts too).
func List(ctx context.Context, s jetstream.Stream) ([]*jetstream.ConsumerInfo, error) {
	var out []*jetstream.ConsumerInfo
	list := s.ListConsumers(ctx)
	for ci := range list.Info() { // read to the end: the lister waits for its reader
		out = append(out, ci)
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		name := "stream"
		if info := s.CachedInfo(); info != nil {
			name = info.Config.Name
		}
		return nil, fmt.Errorf("list consumers of %s: %w", name, err)
	}
	return out, nil
}

// Sums are the figures of one consumer made of several durables (a keyed
// consumer's own and its partitions'), as status, the console and the
// metrics all show them.
type Sums struct {
	Pending                 uint64
	AckPending, Redelivered int
	// AckFloor is the lowest ack floor among the durables that still
	// hold work (pending or unacked messages): every message up to it is
	// acked by every durable. With no work anywhere it is the highest
	// floor, the last message the consumer acked. A durable without work
	// can keep a floor far behind (a partition no key went to since the
	// start keeps 0), which says nothing about what is left to apply.
	AckFloor  uint64
	Delivered uint64 // the last stream sequence delivered by any of them
	Paused    bool
}

// Sum adds up the durables of one consumer.
func Sum(infos []*jetstream.ConsumerInfo) Sums {
	var s Sums
	var busyFloor, idleFloor *uint64
	for _, ci := range infos {
		s.Pending += ci.NumPending
		s.AckPending += ci.NumAckPending
		s.Redelivered += ci.NumRedelivered
		s.Delivered = max(s.Delivered, ci.Delivered.Stream)
		s.Paused = s.Paused || ci.Paused
		f := ci.AckFloor.Stream
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			if busyFloor == nil || f < *busyFloor {
				busyFloor = &f
			}
		} else if idleFloor == nil || f > *idleFloor {
			idleFloor = &f
		}
	}
	switch {
	case busyFloor != nil:
		s.AckFloor = *busyFloor
	case idleFloor != nil:
		s.AckFloor = *idleFloor
	}
	return s
}

// Busy reports whether the durables hold work: messages not delivered
// or not acked yet.
func (s Sums) Busy() bool { return s.Pending > 0 || s.AckPending > 0 }

// OldestUnacked is the age of the oldest HOOKS message a consumer has not
// acked yet, 0 when there is none. The consumer is its durables (a keyed
// one's own and its partitions'): for each that holds work, the first
// message after its ack floor on its own filter subjects, the oldest of
// those. The stream's next message after a floor is not it: a partition
// durable's floor stays at the last message of its partition (0 for one
// that had none yet), and what follows in the stream belongs to the
// other partitions, already applied, so the stream's first message would
// be reported for a paused consumer whose only waiting event is seconds
// old.
func OldestUnacked(ctx context.Context, js jetstream.JetStream, durables []*jetstream.ConsumerInfo) (time.Duration, error) {
	hooks, err := js.Stream(ctx, stream.Hooks)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream.Hooks, err)
	}
	var oldest *jetstream.RawStreamMsg
	for _, ci := range durables {
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			continue
		}
		m, err := firstUnacked(ctx, hooks, ci)
		if err != nil {
			return 0, err
		}
		if m != nil && (oldest == nil || m.Sequence < oldest.Sequence) {
			oldest = m
		}
	}
	if oldest == nil {
		return 0, nil
	}
	return max(time.Since(oldest.Time), 0), nil
}

// firstUnacked is the first HOOKS message after the durable's ack floor
// that its filter subjects match (nil when there is none).
func firstUnacked(ctx context.Context, hooks jetstream.Stream, ci *jetstream.ConsumerInfo) (*jetstream.RawStreamMsg, error) {
	var first *jetstream.RawStreamMsg
	for _, f := range filters(ci, ">") {
		m, err := hooks.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(f))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("consumer %s: first message of %s after its ack floor %d: %w", ci.Name, f, ci.AckFloor.Stream, err)
		}
		if first == nil || m.Sequence < first.Sequence {
			first = m
		}
	}
	return first, nil
}

// filters are the durable's filter subjects; all when it has none.
func filters(ci *jetstream.ConsumerInfo, all string) []string {
	out := ci.Config.FilterSubjects
	if ci.Config.FilterSubject != "" {
		out = append([]string{ci.Config.FilterSubject}, out...)
	}
	if len(out) == 0 && all != "" {
		out = []string{all}
	}
	return out
}

// Pinned reports whether an instance holds the durable's pin now: a
// partition durable with a backlog and no pin is applied by nobody.
func Pinned(ci *jetstream.ConsumerInfo) bool {
	for _, g := range ci.PriorityGroups {
		if g.PinnedClientID != "" {
			return true
		}
	}
	return false
}
