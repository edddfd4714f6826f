package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// What no consumer needs any more: the storage guard deletes HOOKS
// messages only below every consumer's retention floor, so a message
// leaves HOOKS only once every consumer on it has applied (acked) it or
// will never receive it.
//
// A consumer's ack floor alone is too low a floor for a consumer that
// filters: JetStream moves it only when the consumer acks, so one that
// receives a rare event type stays at its last such message while the
// stream grows past it, and would keep every later message of every
// other type in HOOKS. Its floor is therefore the sequence before the
// first message after its ack floor that matches its filter (such a
// message is unacked or not delivered yet), or, when there is none, the
// stream's last sequence.

// listConsumers reads every consumer on HOOKS, durable or not (a running
// replay counts too).
func listConsumers(ctx context.Context, hooks jetstream.Stream) ([]*jetstream.ConsumerInfo, error) {
	var out []*jetstream.ConsumerInfo
	list := hooks.ListConsumers(ctx)
	for ci := range list.Info() {
		out = append(out, ci)
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("list consumers of %s: %w", stream.Hooks, err)
	}
	return out, nil
}

// floorCache remembers, per consumer, where the first message after its
// ack floor that matches its filter was found (or how far none was), so
// that the stream is searched again only past that, or when the ack
// floor moves.
type floorCache map[string]floorProbe

type floorProbe struct {
	ackFloor uint64
	filters  string
	next     uint64 // first matching message after ackFloor; 0: none up to scanned
	scanned  uint64
}

// retentionFloor is the lowest retention floor of consumers (up to
// lastSeq, HOOKS's last sequence read before the consumers were) and the
// consumer holding it. It is an error when there is no consumer, or one
// of the durables the configuration needs (each consumer's own and its
// partition durables) does not exist yet: then nothing is applied.
func retentionFloor(ctx context.Context, hooks jetstream.Stream, cache floorCache, consumers []*jetstream.ConsumerInfo,
	needed []string, lastSeq uint64) (uint64, string, error) {
	seen := map[string]bool{}
	for _, ci := range consumers {
		seen[ci.Name] = true
	}
	for _, name := range needed {
		if !seen[name] {
			return 0, "", fmt.Errorf("durable consumer %s does not exist yet", name)
		}
	}
	if len(consumers) == 0 {
		return 0, "", errors.New("no consumer reads HOOKS")
	}
	floor, holder := uint64(0), ""
	for _, ci := range consumers {
		f, err := consumerFloor(ctx, hooks, cache, ci, lastSeq)
		if err != nil {
			return 0, "", err
		}
		if holder == "" || f < floor {
			floor, holder = f, ci.Name
		}
	}
	if cache != nil {
		for name := range cache {
			if !slices.ContainsFunc(consumers, func(ci *jetstream.ConsumerInfo) bool { return ci.Name == name }) {
				delete(cache, name)
			}
		}
	}
	return floor, holder, nil
}

// consumerFloor is one consumer's retention floor (see the top of this
// file); cache may be nil.
func consumerFloor(ctx context.Context, hooks jetstream.Stream, cache floorCache, ci *jetstream.ConsumerInfo, lastSeq uint64) (uint64, error) {
	ack := ci.AckFloor.Stream
	filters := ci.Config.FilterSubjects
	if ci.Config.FilterSubject != "" {
		filters = append([]string{ci.Config.FilterSubject}, filters...)
	}
	if ack >= lastSeq || len(filters) == 0 {
		return ack, nil // a consumer of every subject needs the next message
	}
	p := floorProbe{ackFloor: ack, filters: strings.Join(filters, " "), scanned: ack}
	if c, ok := cache[ci.Name]; ok && c.ackFloor == p.ackFloor && c.filters == p.filters {
		p = c
	}
	if p.next == 0 && p.scanned < lastSeq {
		next, err := firstMatch(ctx, hooks, p.scanned+1, filters)
		if err != nil {
			return 0, fmt.Errorf("consumer %s: %w", ci.Name, err)
		}
		if next > lastSeq {
			next = 0 // stored after the consumer was read: looked at again next time
		}
		p.next, p.scanned = next, lastSeq
	}
	if cache != nil {
		cache[ci.Name] = p
	}
	if p.next != 0 {
		return p.next - 1, nil
	}
	return p.scanned, nil
}

// firstMatch is the sequence of the first HOOKS message at or after seq
// whose subject matches one of filters, 0 when there is none.
func firstMatch(ctx context.Context, hooks jetstream.Stream, seq uint64, filters []string) (uint64, error) {
	first := uint64(0)
	for _, f := range filters {
		m, err := hooks.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(f))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("find the next message of %s from seq %d: %w", f, seq, err)
		}
		if first == 0 || m.Sequence < first {
			first = m.Sequence
		}
	}
	return first, nil
}

// streamName is s's name, for errors (HOOKS or HOOKS_CONFLICTS).
func streamName(s jetstream.Stream) string {
	if info := s.CachedInfo(); info != nil {
		return info.Config.Name
	}
	return "stream"
}

// ageCut is the first sequence in [from, limit) of a message stored
// after cutoff, limit when every message before limit is older. Message
// times grow with their sequence, so it searches by halves; it looks at
// limit's predecessor first, since a consumer far behind makes that the
// answer, round after round.
func ageCut(ctx context.Context, hooks jetstream.Stream, from, limit uint64, cutoff time.Time) (uint64, error) {
	if limit <= from {
		return from, nil
	}
	newer := func(seq uint64) (bool, uint64, error) {
		m, err := hooks.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return true, seq, nil // nothing at or after seq
		}
		if err != nil {
			return false, 0, fmt.Errorf("read %s message at or after seq %d: %w", streamName(hooks), seq, err)
		}
		return m.Sequence >= limit || m.Time.After(cutoff), m.Sequence, nil
	}
	isNew, _, err := newer(limit - 1)
	if err != nil || !isNew {
		return limit, err
	}
	lo, hi := from, limit-1 // the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		isNew, at, err := newer(mid)
		if err != nil {
			return 0, err
		}
		if isNew {
			hi = mid // no message in [mid, at): cutting at mid or at at is the same
		} else {
			lo = at + 1
		}
	}
	return lo, nil
}
