package engine

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// When a source gains an ordering key, the messages it published before
// stay on their unkeyed subjects in HOOKS and are applied by the
// consumer's own (unkeyed) durable, as before; the new ones go to
// partitions. So that an entity's older events apply before its newer
// ones across that change, an instance starts its partitions only once
// the unkeyed durable holds no message published before the instance
// started: none pending and none unacked up to the stream's last sequence
// at that moment. After the change that is at once (the unkeyed durable of
// a keyed source receives only deliveries without a key); on the first
// start after it, it is however long the backlog takes.

// awaitLegacy waits until the consumer's unkeyed durable has applied
// every message it matches up to HOOKS's last sequence now, or ctx ends.
func (g *group) awaitLegacy(ctx context.Context) {
	s, err := g.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return // HOOKS unreadable: the partitions' own pulls will say so
	}
	upTo := s.CachedInfo().State.LastSeq
	start, logged := time.Now(), false
	for ctx.Err() == nil {
		if g.legacyDone(ctx, s, upTo) {
			if logged {
				g.log.Info("older unkeyed messages applied; partitions start", "consumer", g.c.opts.Name,
					"waited", time.Since(start).Round(time.Millisecond))
			}
			return
		}
		if !logged {
			logged = true
			g.log.Info("partitions wait for the messages published before the ordering key was set",
				"consumer", g.c.opts.Name, "up_to_seq", upTo)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// legacyDone reports whether the unkeyed durable has nothing unapplied
// up to upTo: it does not exist, it has nothing pending or unacked, its
// ack floor is past upTo, or no message it matches lies between its ack
// floor and upTo.
func (g *group) legacyDone(ctx context.Context, s jetstream.Stream, upTo uint64) bool {
	c, err := s.Consumer(ctx, g.c.opts.Name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return true
	}
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false
	}
	floor := info.AckFloor.Stream
	if floor >= upTo || (info.NumPending == 0 && info.NumAckPending == 0) {
		return true
	}
	for _, subject := range g.c.opts.FilterSubjects() {
		m, err := s.GetMsg(ctx, floor+1, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil || m.Sequence <= upTo {
			return false
		}
	}
	return true
}
