package durables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// What no consumer needs any more: the storage guard deletes HOOKS
// messages only below every consumer's retention floor, so a message
// leaves HOOKS only once every consumer on it has applied (acked) it or
// will never receive it; status shows the same floor.
//
// A consumer's ack floor alone is too low a floor for a consumer that
// filters: JetStream moves it only when the consumer acks, so one that
// receives a rare event type stays at its last such message while the
// stream grows past it, and would keep every later message of every
// other type in HOOKS. Its floor is therefore the sequence before the
// first message after its ack floor that matches its filter (such a
// message is unacked or not delivered yet), or, when there is none, the
// stream's last sequence.

// FloorCache remembers, per consumer, where the first message after its
// ack floor that matches its filter was found (or how far none was), so
// that the stream is searched again only past that, or when the ack
// floor moves. The storage guard keeps one across its rounds.
type FloorCache map[string]floorProbe

type floorProbe struct {
	ackFloor uint64
	filters  string
	next     uint64 // first matching message after ackFloor; 0: none up to scanned
	scanned  uint64
}

// Floor is the lowest retention floor of consumers (up to lastSeq,
// HOOKS's last sequence read before the consumers were) and the consumer
// holding it. It is an error when there is no consumer, or one of the
// durables needed (each configured consumer's own and its partition
// durables) does not exist yet: then nothing may be trimmed. cache may be
// nil.
func Floor(ctx context.Context, hooks jetstream.Stream, cache FloorCache, consumers []*jetstream.ConsumerInfo,
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
	for name := range cache {
		if !slices.ContainsFunc(consumers, func(ci *jetstream.ConsumerInfo) bool { return ci.Name == name }) {
			delete(cache, name)
		}
	}
	return floor, holder, nil
}

// consumerFloor is one consumer's retention floor (see the top of this
// file); cache may be nil.
func consumerFloor(ctx context.Context, hooks jetstream.Stream, cache FloorCache, ci *jetstream.ConsumerInfo, lastSeq uint64) (uint64, error) {
	ack := ci.AckFloor.Stream
	fs := filters(ci, "")
	if ack >= lastSeq || len(fs) == 0 {
		return ack, nil // a consumer of every subject needs the next message
	}
	p := floorProbe{ackFloor: ack, filters: strings.Join(fs, " "), scanned: ack}
	if c, ok := cache[ci.Name]; ok && c.ackFloor == p.ackFloor && c.filters == p.filters {
		p = c
	}
	if p.next == 0 && p.scanned < lastSeq {
		next, err := firstMatch(ctx, hooks, p.scanned+1, fs)
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
