package engine

import (
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// What the scheduler's goroutine is told (keyed.go), and how it keeps its
// state.

// schedEvent is a message to the scheduler's goroutine.
type schedEvent struct {
	kind      schedKind
	partition int
	gen       uint64
	msg       jetstream.Msg
	batch     *kbatch
	done      chan struct{}
	foreign   []foreignMsg
	resolved  []uint64
	// repinned: a gate for a new pin, after which what arrived under an
	// earlier one is not known to be this member's any more.
	repinned bool
	fence    bool
}

type schedKind int

const (
	evArrive schedKind = iota
	evAdd
	evGate
	evOpen
	evForeign
	evResolved
	evDrain
	evDone
	evFence
	evBarrier
)

// add starts serving partition p; its messages are gated until the first
// takeover check opens it.
func (s *keyedScheduler) add(p int) { s.events <- schedEvent{kind: evAdd, partition: p} }

// arrive hands over a message of partition p.
func (s *keyedScheduler) arrive(p int, msg jetstream.Msg) {
	s.counters[p].inbound.Add(1)
	s.events <- schedEvent{kind: evArrive, partition: p, msg: msg}
}

// gate stages p's messages from now on until open(p, gen): this member
// was just pinned to the partition (repinned), or deliveries to it were
// lost (a gap in the delivery sequence). Either way another member, or
// the server's redelivery, may hold messages older than what comes next.
// After a new pin, what this member held from before it is dropped
// (unacked: if still pending it comes back), since another member may
// have applied it meanwhile.
func (s *keyedScheduler) gate(p int, gen uint64, repinned bool) {
	s.events <- schedEvent{kind: evGate, partition: p, gen: gen, repinned: repinned}
}

// open ends the takeover check gen of p: nothing of it is held elsewhere.
// It returns once the staged messages are scheduled (and count against the
// partition's window again), so that the next pull's room counts them.
func (s *keyedScheduler) open(p int, gen uint64) {
	done := make(chan struct{})
	s.events <- schedEvent{kind: evOpen, partition: p, gen: gen, done: done}
	<-done
}

// openForeign ends the takeover check gen of p while messages of it may
// still be held elsewhere unapplied: only their keys wait (until
// [keyedScheduler.resolve] names each message, or it arrives here);
// every other key goes on.
func (s *keyedScheduler) openForeign(p int, gen uint64, foreign []foreignMsg) {
	done := make(chan struct{})
	s.events <- schedEvent{kind: evForeign, partition: p, gen: gen, foreign: slices.Clone(foreign), done: done}
	<-done
}

// resolve says that messages of p held elsewhere are no longer: applied
// after all, or below the durable's ack floor.
func (s *keyedScheduler) resolve(p int, seqs []uint64) {
	s.events <- schedEvent{kind: evResolved, partition: p, resolved: slices.Clone(seqs)}
}

// drain stops serving p once its batches in flight are done; what else is
// here is nak'd in stream order, so the member that serves p next gets it
// at once. No message of p may arrive after it.
func (s *keyedScheduler) drain(p int) {
	done := make(chan struct{})
	s.events <- schedEvent{kind: evDrain, partition: p, done: done}
	<-done
}

// barrier returns once every message handed over for p before it has
// been taken in (counted in [partCounters.arrived], or dropped as a
// second delivery): the takeover check's count of what is held here is
// then exact.
func (s *keyedScheduler) barrier(p int) {
	done := make(chan struct{})
	s.events <- schedEvent{kind: evBarrier, partition: p, done: done}
	<-done
}

// fence stops (or resumes) applying: a member that cannot reach NATS long
// enough for others to take its partitions over must not apply what it
// holds, which they get back. It drops what is not being applied.
func (s *keyedScheduler) fence(on bool) {
	if s.fenced.Load() != on {
		s.events <- schedEvent{kind: evFence, fence: on}
	}
}

func (s *keyedScheduler) handle(ev schedEvent) {
	switch ev.kind {
	case evAdd:
		s.parts[ev.partition] = &partState{keys: map[string]struct{}{}, held: map[uint64]*kmsg{}, gated: true}
	case evArrive:
		s.onArrive(ev.partition, ev.msg)
		s.counters[ev.partition].inbound.Add(-1)
	case evGate:
		s.onGate(ev.partition, ev.gen, ev.repinned)
	case evOpen:
		// Opened on counts that agree: nothing of p is held elsewhere,
		// so no key waits any more for what an earlier gate found held
		// (a gate replaced before it was done leaves its entries here).
		if ps := s.parts[ev.partition]; ps != nil && ps.gated && ps.gen == ev.gen {
			for seq := range ps.foreign {
				s.resolveForeign(ev.partition, ps, seq)
			}
		}
		s.onOpen(ev.partition, ev.gen)
		close(ev.done)
	case evForeign:
		s.onForeign(ev.partition, ev.gen, ev.foreign)
		close(ev.done)
	case evResolved:
		if ps := s.parts[ev.partition]; ps != nil {
			for _, seq := range ev.resolved {
				s.resolveForeign(ev.partition, ps, seq)
			}
		}
	case evDrain:
		s.onDrain(ev.partition, ev.done)
	case evDone:
		s.onBatchDone(ev.batch)
	case evFence:
		s.onFence(ev.fence)
	case evBarrier:
		close(ev.done)
	}
}

func (s *keyedScheduler) onArrive(p int, msg jetstream.Msg) {
	ps := s.parts[p]
	if ps == nil || s.fenced.Load() {
		return // not served here (any more): unacked, it comes back after ack_wait
	}
	h := msg.Headers()
	km := &kmsg{msg: msg, partition: p, key: orderKey(h.Get(stream.HeaderSource), h.Get(stream.HeaderOrderingKey)), gen: ps.gen, progress: time.Now()}
	if md, err := msg.Metadata(); err == nil {
		km.seq = md.Sequence.Stream
	}
	if _, dup := ps.held[km.seq]; dup {
		// Another delivery of a message held here (its ack_wait ran out):
		// acking either delivery settles it, so one copy is enough.
		return
	}
	ps.held[km.seq] = km
	s.counters[p].arrived.Add(1)
	if ps.gated {
		// Staged behind a gate, it does not count against the window:
		// the pulls must go on bringing back what another member held.
		ps.staged = append(ps.staged, km)
		s.counters[p].parked.Add(1)
		return
	}
	s.enqueue(ps, km)
}

func (s *keyedScheduler) onGate(p int, gen uint64, repinned bool) {
	ps := s.parts[p]
	if ps == nil {
		return
	}
	ps.gated, ps.gen = true, gen
	if !repinned {
		return
	}
	for _, km := range ps.held {
		if !km.busy && km.gen < gen {
			s.drop(ps, km)
		}
	}
}

// onOpen ends a takeover check: the staged messages, which may include
// older messages redelivered after newer ones, are scheduled in stream
// order.
func (s *keyedScheduler) onOpen(p int, gen uint64) {
	ps := s.parts[p]
	if ps == nil || !ps.gated || ps.gen != gen {
		return
	}
	ps.gated = false
	s.counters[p].parked.Add(-int64(len(ps.staged)))
	sortBySeq(ps.staged)
	for _, km := range ps.staged {
		s.enqueue(ps, km)
	}
	ps.staged = nil
}

// onForeign opens p like onOpen, after recording the messages held
// elsewhere: their keys wait.
func (s *keyedScheduler) onForeign(p int, gen uint64, foreign []foreignMsg) {
	ps := s.parts[p]
	if ps == nil || !ps.gated || ps.gen != gen {
		return
	}
	if ps.foreign == nil {
		ps.foreign = map[uint64]string{}
	}
	// The scan read every unapplied message from the ack floor on: an
	// earlier gate's entry it no longer finds was applied or acked
	// meanwhile, and would never come back to resolve itself.
	found := make(map[uint64]bool, len(foreign))
	for _, f := range foreign {
		found[f.seq] = true
	}
	for seq := range ps.foreign {
		if !found[seq] {
			s.resolveForeign(p, ps, seq)
		}
	}
	for _, f := range foreign {
		if _, held := ps.held[f.seq]; held {
			continue
		}
		if _, known := ps.foreign[f.seq]; known {
			continue
		}
		ps.foreign[f.seq] = f.key
		st := s.keyState(ps, p, f.key)
		st.foreign++
		s.repark(st)
	}
	s.counters[p].foreign.Store(int64(len(ps.foreign)))
	s.onOpen(p, gen)
}

// resolveForeign ends the wait for a foreign message of ps; its key goes
// on once it waits for no other.
func (s *keyedScheduler) resolveForeign(p int, ps *partState, seq uint64) {
	key, ok := ps.foreign[seq]
	if !ok {
		return
	}
	delete(ps.foreign, seq)
	s.counters[p].foreign.Store(int64(len(ps.foreign)))
	if st := s.keys[key]; st != nil {
		st.foreign--
		s.repark(st)
		s.markReady(key, st)
	}
}

// keyState is key's state, created (in partition p) when it has none.
func (s *keyedScheduler) keyState(ps *partState, p int, key string) *keyState {
	st := s.keys[key]
	if st == nil {
		st = &keyState{partition: p}
		s.keys[key] = st
		ps.keys[key] = struct{}{}
	}
	return st
}

// enqueue puts km behind the earlier messages of its key.
func (s *keyedScheduler) enqueue(ps *partState, km *kmsg) {
	st := s.keyState(ps, km.partition, km.key)
	// In stream order: only a redelivery can come after a later message.
	i := len(st.queue)
	for i > 0 && st.queue[i-1].seq > km.seq {
		i--
	}
	st.queue = slices.Insert(st.queue, i, km)
	s.endWaitForLater(st)
	// A message another member held is back once it is in its key's
	// queue, not when it arrives: staged behind a gate, it is not.
	if _, ok := ps.foreign[km.seq]; ok {
		delete(ps.foreign, km.seq)
		s.counters[km.partition].foreign.Store(int64(len(ps.foreign)))
		st.foreign--
	}
	s.repark(st)
	s.markReady(km.key, st)
}

// endWaitForLater ends a block that waits only for a message of the key
// that is not postponed, once one is queued (the postponed ones are tried
// again right after it), or once a postponed one is due.
func (s *keyedScheduler) endWaitForLater(st *keyState) {
	if st.forLater && slices.ContainsFunc(st.queue, func(km *kmsg) bool { return !km.postponed || km.due }) {
		st.retryAt, st.forLater = time.Time{}, false
	}
}

// repark counts st's queue as parked while it waits for foreign
// messages, and signals the feeder when that changes.
func (s *keyedScheduler) repark(st *keyState) {
	n := 0
	if st.foreign > 0 {
		n = len(st.queue)
	}
	if d := n - st.parked; d != 0 {
		st.parked = n
		c := &s.counters[st.partition]
		c.parked.Add(int64(d))
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

func (s *keyedScheduler) markReady(key string, st *keyState) {
	if st.ready || st.busy || !st.retryAt.IsZero() || st.foreign > 0 || len(st.queue) == 0 {
		return
	}
	st.ready, st.readyAt = true, time.Now()
	s.readyQ = append(s.readyQ, key)
}

// onBatchDone settles what was applied or dead-lettered and puts what
// failed back at the head of its key, blocked until its retry time. A
// postponed message falls due, to be tried again at once, when a message
// of its key applied after it was last tried (a batch applies in its
// order): that may be what it waited for. Else it waits for the key's
// next message, or its backoff. A failure's backoff wins over both.
func (s *keyedScheduler) onBatchDone(b *kbatch) {
	s.inflight--
	now := time.Now()
	lastAck := map[string]int{} // the key's last message acked in the batch
	for i, km := range b.msgs {
		if b.actions[i].kind == ack {
			lastAck[km.key] = i
		}
	}
	back := map[string][]*kmsg{}
	for i, km := range b.msgs {
		km.busy = false
		switch a := b.actions[i]; a.kind {
		case ack, term:
			s.settle(km, a.kind)
		default: // nak (failed: retry later), postpone, or hold (behind one that failed, or after a postponement)
			st := s.keys[km.key]
			last, acked := lastAck[km.key]
			switch {
			case a.kind == nak:
				km.retries++
				// It failed this time: it holds its key as a failure does,
				// whatever it said before.
				km.postponed, km.due = false, false
				if st.retryAt.IsZero() || st.forLater {
					s.block(km.key, st, now.Add(a.delay))
					st.forLater = false
				}
			case a.kind == postpone:
				// Counted like a retry, so that its backoff grows and its
				// postponement row goes when it applies.
				km.retries++
				km.postponed = true
				km.due = acked && last > i
				if st.retryAt.IsZero() {
					s.block(km.key, st, now.Add(a.delay))
					st.forLater = true
				}
			default: // held: not tried
				km.due = km.due || (km.postponed && acked)
				if st.retryAt.IsZero() {
					s.block(km.key, st, now) // go on at once
				}
			}
			back[km.key] = append(back[km.key], km)
		}
	}
	for _, km := range b.msgs {
		st := s.keys[km.key]
		if st == nil || !st.busy {
			continue // a key seen earlier in this batch
		}
		st.busy = false
		if _, acked := lastAck[km.key]; acked {
			// Not tried since a message of the key applied.
			for _, q := range st.queue {
				q.due = q.due || q.postponed
			}
		}
		if failed := back[km.key]; len(failed) > 0 {
			// In stream order: a batch tries a later message before
			// postponed ones, and may leave some of them queued.
			st.queue = append(failed, st.queue...)
			sortBySeq(st.queue)
			s.repark(st)
		}
		s.endWaitForLater(st)
		s.markReady(km.key, st)
		s.forget(km.key)
	}
	s.finishDrains()
}

// settle acks, terminates or naks km, and forgets it. It is counted as
// settled before the ack leaves: a takeover check that reads the count
// after the server has seen the ack must not still count it here, or a
// message held elsewhere would hide behind it (see puller.look).
func (s *keyedScheduler) settle(km *kmsg, kind actionKind) {
	s.release(km)
	var err error
	switch kind {
	case ack:
		err = km.msg.Ack()
	case term:
		err = km.msg.Term()
	case nak:
		err = km.msg.Nak()
	}
	if err != nil {
		// Applied and committed: a lost ack is a redelivery the inbox
		// answers as a duplicate. A lost nak waits for ack_wait.
		s.log.Warn("ack failed", "consumer", s.name, "err", err)
	}
}

// release forgets km as held (settled, or dropped unacked).
func (s *keyedScheduler) release(km *kmsg) {
	ps := s.parts[km.partition]
	if ps == nil || ps.held[km.seq] != km {
		return
	}
	delete(ps.held, km.seq)
	c := &s.counters[km.partition]
	c.settled.Add(1)
	select {
	case c.room <- struct{}{}:
	default:
	}
}

// drop forgets a message that is not being applied, unacked: it stops
// getting in-progress acks and, if nobody settles it meanwhile, comes
// back after ack_wait.
func (s *keyedScheduler) drop(ps *partState, km *kmsg) {
	if i := slices.Index(ps.staged, km); i >= 0 {
		ps.staged = slices.Delete(ps.staged, i, i+1)
		s.counters[km.partition].parked.Add(-1)
	}
	if st := s.keys[km.key]; st != nil {
		if i := slices.Index(st.queue, km); i >= 0 {
			st.queue = slices.Delete(st.queue, i, i+1)
			s.repark(st)
		}
		s.forget(km.key)
	}
	s.release(km)
}

// forget drops a key that has nothing here any more.
func (s *keyedScheduler) forget(key string) {
	st := s.keys[key]
	if st == nil || st.busy || st.foreign > 0 || len(st.queue) > 0 {
		return
	}
	if st.ready {
		if i := slices.Index(s.readyQ, key); i >= 0 {
			s.readyQ = slices.Delete(s.readyQ, i, i+1)
		}
	}
	delete(s.keys, key)
	if ps := s.parts[st.partition]; ps != nil {
		delete(ps.keys, key)
	}
}

func (s *keyedScheduler) onDrain(p int, done chan struct{}) {
	ps := s.parts[p]
	if ps == nil {
		close(done)
		return
	}
	ps.draining, ps.done = true, done
	s.finishDrains()
}

// finishDrains completes the drain of every draining partition with no
// batch in flight: what it still holds is nak'd in stream order, so the
// member that takes the partition over gets it at once, before anything
// newer.
func (s *keyedScheduler) finishDrains() {
	for p, ps := range s.parts {
		if !ps.draining || s.busyIn(ps) {
			continue
		}
		rest := make([]*kmsg, 0, len(ps.held))
		for _, km := range ps.held {
			rest = append(rest, km)
		}
		sortBySeq(rest)
		for _, km := range rest {
			s.settle(km, nak)
		}
		for key := range ps.keys {
			if st := s.keys[key]; st != nil {
				st.queue = nil
				s.repark(st)
				if st.ready {
					if i := slices.Index(s.readyQ, key); i >= 0 {
						s.readyQ = slices.Delete(s.readyQ, i, i+1)
					}
				}
			}
			delete(s.keys, key)
		}
		c := &s.counters[p]
		c.parked.Add(-int64(len(ps.staged)))
		c.foreign.Store(0)
		delete(s.parts, p)
		close(ps.done)
	}
}

// busyIn reports whether a batch with messages of ps is in flight.
func (s *keyedScheduler) busyIn(ps *partState) bool {
	for key := range ps.keys {
		if st := s.keys[key]; st != nil && st.busy {
			return true
		}
	}
	return false
}

// onFence drops everything not being applied, or lifts the fence. Each
// fence starts a new epoch: a feeder that sees it changed gates its
// partition as for a new pin (partition.go), since what it delivered
// before may have gone to another member meanwhile.
func (s *keyedScheduler) onFence(on bool) {
	s.fenced.Store(on)
	if !on {
		return
	}
	s.fenceEpoch.Add(1)
	s.log.Warn("consumer fenced: NATS unreachable for longer than a member's lease; what it holds is dropped for the member that takes its partitions over",
		"consumer", s.name)
	for _, ps := range s.parts {
		for _, km := range ps.held {
			if !km.busy {
				s.drop(ps, km)
			}
		}
	}
}
