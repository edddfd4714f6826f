package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// When a source gains an ordering key, the messages it published before
// stay on their unkeyed subjects in HOOKS and are applied by the
// consumer's own (unkeyed) durable, as before; the new ones go to
// partitions. So that an entity's older events apply before its newer
// ones across that change, an instance starts its partitions only once
// the unkeyed durable has settled every message of a keyed source that was
// published before the source had its key, up to the stream's last
// sequence when the instance started. After the change that is at once;
// on the first start after it, it is however long the backlog takes.
//
// A keyed source publishes unkeyed messages of its own too: a delivery
// that names no key (Stripe's balance.available) or whose key cannot be
// read (Shopify XML). They never had an entity to be ordered with, so
// nothing waits for them: one of them that fails for ever would otherwise
// hold every partition on every start. The ingress marks every unkeyed
// message (stream.HeaderUnkeyed): with why it had no key (the source's
// own), or with stream.UnkeyedKeyOff (the source had no key: from before
// it, even when a keyed message of the source comes before it, as when a
// key was turned on, off and on again). A message stored by an ingress
// that did not mark it yet is the source's own when the source's first
// keyed message in HOOKS comes before it.

// awaitLegacy waits until the consumer's unkeyed durable has applied
// every message of its keyed sources from before their key, up to
// HOOKS's last sequence now, or ctx ends.
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
	l := &legacyScan{s: s, upTo: upTo, firstKeyed: map[string]uint64{}}
	for ctx.Err() == nil {
		if g.legacyDone(ctx, l) {
			if logged {
				g.log.Info("older unkeyed messages applied; partitions start", "consumer", g.c.opts.Name,
					"waited", time.Since(start).Round(time.Millisecond))
			}
			return
		}
		if !logged {
			logged = true
			g.log.Info("partitions wait for the messages published before the ordering key was set",
				"consumer", g.c.opts.Name, "up_to_seq", upTo, "waiting_for_seq", l.waitingFor)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// legacyScan is what awaitLegacy found so far.
type legacyScan struct {
	s    jetstream.Stream
	upTo uint64
	// settledTo: every message from before a key up to it is settled.
	settledTo uint64
	// firstKeyed is each source's first keyed message in HOOKS
	// (math.MaxUint64: none up to upTo).
	firstKeyed map[string]uint64
	// waitingFor is the first message found unsettled, for the log.
	waitingFor uint64
}

// legacyDone reports whether the unkeyed durable has nothing unapplied
// from before the keys up to l.upTo: it has nothing pending or unacked,
// its ack floor is past upTo, or every such message between its ack floor
// and upTo is applied or dead-lettered. l.settledTo remembers how far
// that was found true, so that each look reads on from there, at most
// maxForeignScan messages.
func (g *group) legacyDone(ctx context.Context, l *legacyScan) bool {
	var floor uint64
	c, err := l.s.Consumer(ctx, g.c.opts.Name)
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
		if floor >= l.upTo || (info.NumPending == 0 && info.NumAckPending == 0) {
			return true
		}
	}
	// Between the floor and upTo, only the keyed sources' messages from
	// before their key count, and only those not applied yet: another
	// source's failing message, or a keyed source's own unkeyed one, may
	// hold the floor for ever.
	from := max(floor, l.settledTo) + 1
	found, err := scanHeaders(ctx, g.js, g.c.opts.legacySubjects(), from, l.upTo, maxForeignScan)
	full := errors.Is(err, errForeignScan)
	if err != nil && !full {
		return false
	}
	var legacy []foreignRef
	before := make(map[uint64]bool, len(found))
	for _, r := range found {
		b, err := l.beforeKey(ctx, r)
		if err != nil {
			return false
		}
		if b {
			legacy, before[r.seq] = append(legacy, r), true
		}
	}
	settled := map[uint64]bool{}
	if len(legacy) > 0 {
		if settled, err = settledIn(ctx, g.c.pool, g.c.opts.Name, legacy); err != nil {
			return false
		}
	}
	for _, r := range found {
		if before[r.seq] && !settled[r.seq] {
			l.waitingFor = r.seq
			return false
		}
		l.settledTo = r.seq
	}
	if full {
		return false // read on from settledTo next time
	}
	l.settledTo = l.upTo
	return true
}

// beforeKey reports whether r, an unkeyed message of a keyed source, was
// published before its source had a key: marked so, or, unmarked, no
// keyed message of its source precedes it.
func (l *legacyScan) beforeKey(ctx context.Context, r foreignRef) (bool, error) {
	switch r.unkeyed {
	case stream.UnkeyedKeyOff:
		return true, nil
	case "":
	default:
		return false, nil // the source's own
	}
	first, ok := l.firstKeyed[r.source]
	if !ok {
		msg, err := l.s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(stream.HooksKeyedRoot+".*."+r.source+".>"))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			// None yet: one stored from now on comes after every message
			// scanned, so there is no need to look again.
			first = math.MaxUint64
		case err != nil:
			return false, fmt.Errorf("first keyed message of source %s: %w", r.source, err)
		default:
			first = msg.Sequence
		}
		l.firstKeyed[r.source] = first
	}
	return r.seq < first, nil
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
