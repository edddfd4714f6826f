package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Taking a partition over (docs/DESIGN.md, "Handing a partition over").
// A member gates a partition when messages older than what comes next may
// be held elsewhere; the gate lifts once the member knows what another
// may still hold. It finds out in the partition's own pull loop, between
// two pulls: then no delivery to this member is on its way and every
// message handed to the scheduler has been taken in, so the count of
// messages held here is exact, and when JetStream counts no more unacked
// messages than that, nothing is held anywhere else. (A message is counted
// settled here before its ack leaves, so an ack on its way makes the
// member wait a little longer, never open too early.)
//
// Otherwise the member reads, once per gate, the partition's messages
// between the durable's ack floor and its last delivery (headers only, at
// most maxForeignScan of them): those not here, not applied and not
// dead-lettered are held elsewhere, and only their keys wait. When there
// are more than that to read, the whole partition waits instead until the
// counts agree: the messages held elsewhere come back (at once after a
// drain's naks, after ack_wait from a member that died), so either way a
// takeover ends within ack_wait plus a pin's lapse, with a bounded read.
// While a partition is gated its staged messages do not count against its
// window, so the pulls that bring those messages back never stop.

// maxForeignScan bounds the messages a takeover reads to find the keys
// another member held; past it the whole partition waits instead.
const maxForeignScan = 20000

var errForeignScan = errors.New("too many messages held elsewhere to read them one by one")

// Looks of a takeover: the first right after the pull that gated the
// partition (so a partition nobody else held opens before the next pull
// stages more), then backing off.
const (
	firstLook = 20 * time.Millisecond
	maxLook   = time.Second
)

// puller is one partition's pulls: what it knows of the pin and the
// deliveries it got, to tell when the partition must be gated, and the
// takeover check of the current gate.
type puller struct {
	g    *group
	d    *durable
	cons jetstream.Consumer
	p    int
	// pin is the pin id the last message named; dseq the last delivery
	// sequence; epoch the scheduler's fence epoch seen.
	pin   string
	dseq  uint64
	epoch uint64
	// to is the takeover check in progress (nil: none).
	to *takeover
}

// takeover is the check of one gate of a partition.
type takeover struct {
	gen     uint64
	start   time.Time
	next    time.Time // when to look next
	delay   time.Duration
	looks   int
	opened  bool // the gate is open; foreign keys may still wait
	scanned bool // the range was read, or found too long to read
	waiting []foreignMsg
	logged  bool
}

// pull feeds partition p's messages to the scheduler until ctx ends
// (after the pull in flight brings what it has) or the durable is gone.
// Each pull asks for the room the partition has here, so what the server
// sends always fits. It returns the pin it held last.
func (g *group) pull(ctx context.Context, d *durable, p int) (string, error) {
	pl := &puller{g: g, d: d, cons: d.cons, p: p, epoch: g.sched.fenceEpoch.Load()}
	narrowCtx, stopNarrowing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { d.watchNarrowing(narrowCtx, g.js, stream.Hooks, g.log) })
	defer func() { stopNarrowing(); wg.Wait() }()
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		g.c.gate.wait(ctx)
		room := g.sched.waitRoom(ctx, p, g.partitionWindow())
		if ctx.Err() != nil {
			break
		}
		err := pl.fetch(room)
		switch {
		case err == nil, errors.Is(err, jetstream.ErrPinIDMismatch):
			delay = 100 * time.Millisecond
			pl.check(ctx)
			continue
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			return pl.pin, fmt.Errorf("consumer %s partition %d: pull: %w", g.c.opts.Name, p, err)
		}
		g.log.Warn("pull failed", "consumer", g.c.opts.Name, "partition", p, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
	return pl.pin, nil
}

// fetch makes one pull of at most room messages and hands them over.
// While a takeover check waits for its next look, the pull waits no
// longer than that.
func (pl *puller) fetch(room int) error {
	wait := pullWait
	if pl.to != nil {
		wait = min(wait, max(time.Until(pl.to.next), 100*time.Millisecond))
	}
	if pl.dseq == 0 {
		// No delivery seen yet: the first one gates the partition
		// (observe), and the gate's first look runs only once this pull
		// ends. A pull for the whole room ends when the room is full or
		// after wait, so what a partition gets in its first second would
		// sit gated until then (under a steady load the lag stays, the
		// backlog of that second never drains). A pull for one message
		// ends with that message.
		room = 1
	}
	batch, err := pl.cons.Fetch(room, jetstream.FetchMaxWait(wait), jetstream.FetchMaxBytes(partitionBytes),
		jetstream.FetchPriorityGroup(priorityGroup))
	if err != nil {
		return err
	}
	for msg := range batch.Messages() {
		pl.observe(msg)
		if !pl.d.skip(msg, pl.g.log) {
			pl.g.sched.arrive(pl.p, msg)
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return err
	}
	return nil
}

// observe gates the partition before msg is handed over when messages
// older than it may be held elsewhere or come back later:
//   - it is the first delivery this puller sees (a takeover);
//   - deliveries were lost: a gap in the delivery sequence, which counts
//     every delivery of the durable whoever got it (a reconnect, a pull
//     given up before its messages came, or another member pinned in
//     between);
//   - a fence dropped what this member held.
//
// A new pin without a gap needs nothing: no delivery went elsewhere in
// between (the pin lapses while a full partition does not pull, and the
// same member is pinned again). After a new pin with a gap, or a fence,
// what this member held before may be another's now, so it is dropped.
func (pl *puller) observe(msg jetstream.Msg) {
	var dseq uint64
	if md, err := msg.Metadata(); err == nil {
		dseq = md.Sequence.Consumer
	}
	pin, epoch := msg.Headers().Get(pinHeader), pl.g.sched.fenceEpoch.Load()
	fresh := pl.dseq == 0
	gap := !fresh && dseq != pl.dseq+1
	fenced := epoch != pl.epoch
	repinned := pin != pl.pin
	pl.pin, pl.epoch, pl.dseq = pin, epoch, dseq
	if !fresh && !gap && !fenced {
		return
	}
	gen := pl.g.sched.gens.Add(1)
	pl.g.sched.gate(pl.p, gen, fresh || fenced || (gap && repinned))
	now := time.Now()
	pl.to = &takeover{gen: gen, start: now, next: now, delay: firstLook}
}

// check takes the next look of the takeover in progress, when it is due.
func (pl *puller) check(ctx context.Context) {
	to := pl.to
	if to == nil || time.Now().Before(to.next) {
		return
	}
	if pl.look(ctx, to) {
		pl.to = nil
		return
	}
	to.delay = min(2*to.delay, maxLook)
	to.next = time.Now().Add(to.delay)
}

// look is one look of takeover to; it reports whether the takeover is
// over: the gate is open and no key waits for a message held elsewhere.
func (pl *puller) look(ctx context.Context, to *takeover) bool {
	g, p := pl.g, pl.p
	g.sched.barrier(p) // every message handed over is counted here
	c := &g.sched.counters[p]
	here := g.sched.held(p)
	info, err := pl.cons.Info(ctx)
	if err != nil {
		return false
	}
	to.looks++
	switch {
	case info.NumAckPending <= here:
		if !to.opened {
			g.sched.open(p, to.gen)
		} else if len(to.waiting) > 0 {
			g.sched.resolve(p, seqsOf(to.waiting))
		}
		pl.logDone(to)
		return true
	case to.opened:
		// Done once every foreign message is back here or below the ack
		// floor: under steady traffic the counts above need not agree.
		to.waiting = g.recheckForeign(p, info.AckFloor.Stream, to.waiting)
		if len(to.waiting) == 0 || c.foreign.Load() == 0 {
			pl.logDone(to)
			return true
		}
		return false
	case to.scanned || to.looks < 2:
		// An ack on its way can make the first look disagree; past it,
		// read what is missing, once.
		return false
	}
	to.scanned = true
	foreign, err := g.foreignUnapplied(ctx, info, p)
	if err != nil {
		to.logged = true
		g.log.Info("partition taken over; it waits for the messages another member held (they return after ack_wait)",
			"consumer", g.c.opts.Name, "partition", p, "elsewhere", info.NumAckPending-here, "reason", errtext.ForLog(err))
		return false
	}
	g.sched.openForeign(p, to.gen, foreign)
	to.opened, to.waiting = true, foreign
	// The scan finds every unapplied message of the range, the ones this
	// member holds itself too; only the others wait (openForeign skips
	// the held ones and counts the rest, synchronously).
	waiting := c.foreign.Load()
	if len(foreign) == 0 || waiting == 0 {
		return true
	}
	to.logged = true
	g.log.Info("partition taken over; the keys of messages another member held wait for them (they return after ack_wait)",
		"consumer", g.c.opts.Name, "partition", p, "messages", waiting, "unapplied", len(foreign))
	return false
}

func (pl *puller) logDone(to *takeover) {
	if to.logged {
		pl.g.log.Info("partition taken over", "consumer", pl.g.c.opts.Name, "partition", pl.p,
			"waited", time.Since(to.start).Round(time.Millisecond))
	}
}

// foreignRef is a message found between a durable's ack floor and its
// last delivery.
type foreignRef struct {
	foreignMsg
	source, id string
	// unkeyed is the message's [stream.HeaderUnkeyed]: why a keyed
	// source's own message has no key, or that its source had none
	// (see upgrade.go).
	unkeyed string
}

// foreignUnapplied reads partition p's messages between the durable's
// ack floor and its last delivery (what another member may hold), headers
// only, and returns those the inbox does not show applied and that were
// not dead-lettered. It reads at most maxForeignScan messages.
func (g *group) foreignUnapplied(ctx context.Context, info *jetstream.ConsumerInfo, p int) ([]foreignMsg, error) {
	from, to := info.AckFloor.Stream+1, info.Delivered.Stream
	if from > to {
		return nil, nil
	}
	found, err := scanHeaders(ctx, g.js, g.c.opts.keyedFilterSubjects(p), from, to, g.maxForeignScan())
	if err != nil {
		return nil, err
	}
	applied, err := settledIn(ctx, g.c.pool, g.c.opts.Name, found)
	if err != nil {
		return nil, err
	}
	var out []foreignMsg
	for _, r := range found {
		if !applied[r.seq] {
			out = append(out, r.foreignMsg)
		}
	}
	return out, nil
}

// scanHeaders reads the headers of the messages on subjects from sequence
// from to to, through an ordered consumer of its own (one request per
// thousand messages, instead of one per message), at most limit of them
// (past it, what it read and errForeignScan).
func scanHeaders(ctx context.Context, js jetstream.JetStream, subjects []string, from, to uint64, limit int) ([]foreignRef, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, stream.Hooks, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: from, HeadersOnly: true, InactiveThreshold: time.Minute,
		// A name of its own: an ordered consumer numbers the consumers it
		// creates from 1, and one left by the last scan could answer.
		NamePrefix: "hookbridge_scan_" + nuid.Next(),
	})
	if err != nil {
		return nil, fmt.Errorf("read %s from %d: %w", stream.Hooks, from, err)
	}
	ci := cons.CachedInfo()
	if ci == nil {
		return nil, fmt.Errorf("read %s from %d: no consumer info", stream.Hooks, from)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		_ = js.DeleteConsumer(dctx, stream.Hooks, ci.Name) // best effort: it expires anyway
	}()
	if ci.NumPending == 0 {
		return nil, nil
	}
	var found []foreignRef
	for left := ci.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", stream.Hooks, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if md.Sequence.Stream > to {
				return found, nil
			}
			h := m.Headers()
			found = append(found, foreignRef{foreignMsg{md.Sequence.Stream, orderKey(h.Get(stream.HeaderSource), h.Get(stream.HeaderOrderingKey))},
				h.Get(stream.HeaderSource), h.Get(stream.HeaderEventID), h.Get(stream.HeaderUnkeyed)})
			if len(found) >= limit {
				return found, errForeignScan
			}
			left = md.NumPending
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("read %s: %w", stream.Hooks, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read %s: no message in 5s with %d left", stream.Hooks, left)
		}
	}
	return found, nil
}

func (g *group) maxForeignScan() int {
	if n := g.c.opts.maxForeignScan; n > 0 {
		return n
	}
	return maxForeignScan
}

// settledIn reports which of found consumer has applied (the inbox has
// the event) or dead-lettered (terminated, so nobody holds it), by stream
// sequence.
func settledIn(ctx context.Context, pool *pgxpool.Pool, consumer string, found []foreignRef) (map[uint64]bool, error) {
	bySource := map[string][]foreignRef{}
	keys := make([]store.MessageKey, 0, len(found))
	for _, r := range found {
		bySource[r.source] = append(bySource[r.source], r)
		keys = append(keys, store.MessageKey{Source: r.source, EventID: r.id, StreamSeq: r.seq})
	}
	out := make(map[uint64]bool, len(found))
	for source, refs := range bySource {
		ids := make([]string, len(refs))
		for i, r := range refs {
			ids[i] = r.id
		}
		got, err := store.InboxFindApplied(ctx, pool, consumer, source, ids)
		if err != nil {
			return nil, fmt.Errorf("read the inbox: %w", err)
		}
		applied := make(map[string]bool, len(got))
		for _, id := range got {
			applied[id] = true
		}
		for _, r := range refs {
			if applied[r.id] {
				out[r.seq] = true
			}
		}
	}
	dead, err := store.DeadLetterFindAny(ctx, pool, consumer, keys)
	if err != nil {
		return nil, fmt.Errorf("read the dead letters: %w", err)
	}
	for seq := range dead {
		out[seq] = true
	}
	return out, nil
}

// recheckForeign resolves the foreign messages now below the durable's
// ack floor and returns the rest. (Those that come back are resolved by
// the scheduler as they arrive; resolving one twice changes nothing.)
func (g *group) recheckForeign(p int, floor uint64, waiting []foreignMsg) []foreignMsg {
	var done []uint64
	var rest []foreignMsg
	for _, f := range waiting {
		if f.seq <= floor {
			done = append(done, f.seq)
		} else {
			rest = append(rest, f)
		}
	}
	if len(done) > 0 {
		g.sched.resolve(p, done)
	}
	return rest
}

func seqsOf(fs []foreignMsg) []uint64 {
	out := make([]uint64, len(fs))
	for i, f := range fs {
		out[i] = f.seq
	}
	return out
}
