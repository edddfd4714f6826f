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
	if g.c.opts.KeyedSources != nil && len(g.c.opts.KeyedSources) == 0 {
		return // no source has a key now: the partitions only drain
	}
	s, err := g.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return // HOOKS unreadable: the partitions' own pulls will say so
	}
	upTo := s.CachedInfo().State.LastSeq
	start, logged := time.Now(), false
	var settledTo uint64 // every keyed source's message up to it is applied
	for ctx.Err() == nil {
		if g.legacyDone(ctx, s, upTo, &settledTo) {
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
// of the keyed sources up to upTo: it has nothing pending or unacked, its
// ack floor is past upTo, or every message of a
// keyed source between its ack floor and upTo is applied or
// dead-lettered. *settledTo remembers how far that was found true, so
// that each look reads on from there, at most maxForeignScan messages.
func (g *group) legacyDone(ctx context.Context, s jetstream.Stream, upTo uint64, settledTo *uint64) bool {
	var floor uint64
	c, err := s.Consumer(ctx, g.c.opts.Name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		// Not created yet (the runner starts beside the partitions): it
		// will deliver everything, so everything counts.
	case err != nil:
		return false
	default:
		info, err := c.Info(ctx)
		if err != nil {
			return false
		}
		floor = info.AckFloor.Stream
		if floor >= upTo || (info.NumPending == 0 && info.NumAckPending == 0) {
			return true
		}
	}
	// Between the floor and upTo, only the keyed sources' messages count,
	// and only those not applied yet: another source's failing message
	// may hold the floor for ever.
	from := max(floor, *settledTo) + 1
	found, err := scanHeaders(ctx, g.js, g.c.opts.legacySubjects(), from, upTo, maxForeignScan)
	full := errors.Is(err, errForeignScan)
	if err != nil && !full {
		return false
	}
	settled, err := settledIn(ctx, g.c.pool, g.c.opts.Name, found)
	if err != nil {
		return false
	}
	for _, r := range found {
		if !settled[r.seq] {
			return false
		}
		*settledTo = r.seq
	}
	if full {
		return false // read on from settledTo next time
	}
	*settledTo = upTo
	return true
}

// legacySubjects are the unkeyed subjects of the consumer's keyed sources:
// where their messages from before the key lie.
func (o *Options) legacySubjects() []string {
	if o.KeyedSources == nil {
		return o.FilterSubjects()
	}
	keyed := *o
	keyed.Sources = o.KeyedSources
	return keyed.FilterSubjects()
}
