package consumer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The scheduler of a keyed consumer on one instance (docs/DESIGN.md,
// "Order"). It takes the messages of the partitions this instance serves
// (partition.go feeds them) and builds batches from them under one rule:
// an event is applied only once every earlier event of its ordering key
// has been applied or dead-lettered. Different keys go in parallel, in
// the same batch or in concurrent ones, whatever their partitions.
//
// One goroutine owns all of its state; feeders, takeover checks and
// workers talk to it through channels. Each key is in one of these states:
//
//	idle     no message of it is here
//	ready    messages queued, in the ready list, waiting for a batch
//	busy     a batch with its messages is being applied; later
//	         messages of the key queue behind it
//	blocked  its oldest message failed and waits for its retry time;
//	         later messages queue behind it, other keys go on
//
// A failed event is retried here, not nak'd: a nak would let JetStream
// deliver the key's later events before it. Its message stays unacked
// (in-progress acks keep it) until it applies or is dead-lettered.

// kmsg is a message of a keyed consumer in this instance's hands.
type kmsg struct {
	msg       jetstream.Msg
	partition int
	seq       uint64
	key       string
	// retries counts the failed applies retried here; JetStream's
	// delivery count does not see them (see retriedMsg).
	retries  uint64
	progress time.Time // last in-progress ack, or arrival
}

// keyState is one ordering key's place in the scheduler.
type keyState struct {
	queue   []*kmsg   // not yet in a batch, in stream order
	busy    bool      // a batch with messages of this key is in flight
	retryAt time.Time // set while blocked
	ready   bool      // in the ready list
	// foreign counts the key's messages another member held when this
	// one took the partition over and that are not applied yet: the key
	// waits until each has come here, or was applied after all.
	foreign int
}

// partState is one partition this instance serves.
type partState struct {
	keys map[string]struct{}
	// held are the stream sequences of its unsettled messages; a second
	// delivery of one of them (an ack_wait expiry) is dropped.
	held map[uint64]struct{}
	// gen is the takeover check being waited for; while gated, messages
	// are staged, not scheduled (see [keyedScheduler.gate]).
	gen    uint64
	gated  bool
	staged []*kmsg
	// foreign are the messages (seq: key) another member held unapplied
	// when this one took the partition over; see [keyedScheduler.openForeign].
	foreign  map[uint64]string
	draining bool
	done     chan struct{}
}

// kbatch is a batch in flight.
type kbatch struct {
	msgs    []*kmsg
	actions []action
}

// schedEvent is a message to the scheduler's goroutine.
type schedEvent struct {
	kind      schedKind
	partition int
	gen       uint64
	msg       jetstream.Msg
	batch     *kbatch
	done      chan struct{}
	dead      []deadRef
	foreign   []foreignMsg
	resolved  []uint64
}

// foreignMsg is a message of a partition that another member held, not
// applied, when this member took the partition over.
type foreignMsg struct {
	seq uint64
	key string
}

type schedKind int

const (
	evArrive schedKind = iota
	evAdd
	evGate
	evOpen
	evDrain
	evDone
	evDead
	evForeign
	evResolved
)

// keyedScheduler applies the messages of the partitions this instance
// serves, key by key in stream order.
type keyedScheduler struct {
	name        string
	concurrency int
	batchSize   int
	ackWait     time.Duration
	log         *slog.Logger
	// process applies a batch (a keyed applier) and returns an action per
	// message; it runs on a worker goroutine with a context shutdown does
	// not cancel.
	process func(ctx context.Context, msgs []jetstream.Msg) []action
	backoff func(delivery uint64) time.Duration
	// passed is called, off the scheduler's goroutine, when an event of a
	// key applies after an earlier event of the key was dead-lettered.
	passed func(ctx context.Context, dead deadRef, later *kmsg)

	events chan schedEvent
	// unsettled counts, per partition, the messages here not yet acked
	// (read by the takeover check, partition.go).
	unsettled []atomic.Int64

	// State below is the scheduler goroutine's alone.
	keys     map[string]*keyState
	parts    map[int]*partState
	readyQ   []string
	inflight int
	// dead remembers, per key, the last dead-lettered message whose
	// later events have not applied yet.
	dead map[string]deadRef
}

// deadRef is a dead-lettered keyed message.
type deadRef struct {
	partition int
	key       string
	store.MessageKey
}

func newKeyedScheduler(name string, partitions, concurrency, batchSize int, ackWait time.Duration, log *slog.Logger) *keyedScheduler {
	return &keyedScheduler{
		name: name, concurrency: concurrency, batchSize: batchSize, ackWait: ackWait, log: log,
		events:    make(chan schedEvent, 1024),
		unsettled: make([]atomic.Int64, partitions),
		keys:      map[string]*keyState{},
		parts:     map[int]*partState{},
		dead:      map[string]deadRef{},
	}
}

// The feeders' and checks' side.

func (s *keyedScheduler) send(ctx context.Context, ev schedEvent) bool {
	select {
	case s.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// add starts serving partition p; its messages are gated until the first
// takeover check opens it.
func (s *keyedScheduler) add(p int) { s.events <- schedEvent{kind: evAdd, partition: p} }

// arrive hands over a message of partition p.
func (s *keyedScheduler) arrive(p int, msg jetstream.Msg) {
	s.events <- schedEvent{kind: evArrive, partition: p, msg: msg}
}

// gate stages p's messages from now on until open(p, gen): the partition
// has a new pinned client (this instance) and another member may still
// hold some of its messages.
func (s *keyedScheduler) gate(p int, gen uint64) {
	s.events <- schedEvent{kind: evGate, partition: p, gen: gen}
}

// open ends the takeover check gen of p.
func (s *keyedScheduler) open(p int, gen uint64) {
	s.events <- schedEvent{kind: evOpen, partition: p, gen: gen}
}

// openForeign ends the takeover check gen of p while other members still
// hold unapplied messages of it: only their keys wait (until [resolve]
// names each message, or it arrives here); every other key goes on.
func (s *keyedScheduler) openForeign(p int, gen uint64, foreign []foreignMsg) {
	s.events <- schedEvent{kind: evForeign, partition: p, gen: gen, foreign: foreign}
}

// resolve says that messages of p another member held are no longer
// foreign: applied after all, or below the durable's ack floor.
func (s *keyedScheduler) resolve(p int, seqs []uint64) {
	s.events <- schedEvent{kind: evResolved, partition: p, resolved: seqs}
}

// drain stops serving p once what is here has been applied (or, for
// blocked keys, nak'd so the next member gets it at once) and returns
// when that is done. No message of p may arrive after it.
func (s *keyedScheduler) drain(p int) {
	done := make(chan struct{})
	s.events <- schedEvent{kind: evDrain, partition: p, done: done}
	<-done
}

// seedDead hands over the dead letters of p's keys that no later event
// has passed yet (read from the database when p starts here).
func (s *keyedScheduler) seedDead(p int, refs []deadRef) {
	s.events <- schedEvent{kind: evDead, partition: p, dead: refs}
}

// heldBy reports the unsettled messages of p here.
func (s *keyedScheduler) heldBy(p int) int64 { return s.unsettled[p].Load() }

// run is the scheduler's goroutine. It returns when stop is closed and
// every partition has been drained.
func (s *keyedScheduler) run(stop <-chan struct{}, applyCtx context.Context) {
	tick := time.NewTicker(s.progressInterval() / 2)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopping := false
	for {
		if stopping && len(s.parts) == 0 && s.inflight == 0 {
			return
		}
		s.dispatch(applyCtx)
		resetTimer(timer, s.nextWake())
		select {
		case ev := <-s.events:
			s.handle(ev)
		case <-timer.C:
		case <-tick.C:
			s.keepInProgress()
		case <-stop:
			stop, stopping = nil, true
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(max(d, time.Millisecond))
}

func (s *keyedScheduler) handle(ev schedEvent) {
	switch ev.kind {
	case evAdd:
		s.parts[ev.partition] = &partState{keys: map[string]struct{}{}, held: map[uint64]struct{}{}, gated: true}
	case evArrive:
		s.onArrive(ev.partition, ev.msg)
	case evGate:
		if ps := s.parts[ev.partition]; ps != nil {
			ps.gated, ps.gen = true, ev.gen
		}
	case evOpen:
		s.onOpen(ev.partition, ev.gen)
	case evDrain:
		if ps := s.parts[ev.partition]; ps != nil {
			ps.draining, ps.done = true, ev.done
			s.finishDrains()
		} else {
			close(ev.done)
		}
	case evDone:
		s.onBatchDone(ev.batch)
	case evForeign:
		s.onForeign(ev.partition, ev.gen, ev.foreign)
	case evResolved:
		if ps := s.parts[ev.partition]; ps != nil {
			for _, seq := range ev.resolved {
				s.resolveForeign(ps, seq)
			}
		}
	case evDead:
		for _, d := range ev.dead {
			if _, known := s.dead[d.key]; !known {
				s.dead[d.key] = d
			}
		}
	}
}

func (s *keyedScheduler) onArrive(p int, msg jetstream.Msg) {
	ps := s.parts[p]
	if ps == nil {
		return // a partition that was drained: not ours; ack_wait brings it back
	}
	km := &kmsg{msg: msg, partition: p, key: msg.Headers().Get(stream.HeaderOrderingKey), progress: time.Now()}
	if md, err := msg.Metadata(); err == nil {
		km.seq = md.Sequence.Stream
	}
	if _, dup := ps.held[km.seq]; dup && km.seq != 0 {
		// Another delivery of a message held here (its ack_wait ran out):
		// acking either delivery settles it, so one copy is enough.
		return
	}
	ps.held[km.seq] = struct{}{}
	s.unsettled[p].Add(1)
	s.resolveForeign(ps, km.seq) // it came back: it is held here now
	if ps.gated {
		ps.staged = append(ps.staged, km)
		return
	}
	s.enqueue(ps, km)
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
	slices.SortStableFunc(ps.staged, func(a, b *kmsg) int { return cmp.Compare(a.seq, b.seq) })
	for _, km := range ps.staged {
		s.enqueue(ps, km)
	}
	ps.staged = nil
}

// onForeign opens p like onOpen, after recording the messages other
// members held unapplied: their keys wait.
func (s *keyedScheduler) onForeign(p int, gen uint64, foreign []foreignMsg) {
	ps := s.parts[p]
	if ps == nil || !ps.gated || ps.gen != gen {
		return
	}
	if ps.foreign == nil {
		ps.foreign = map[uint64]string{}
	}
	for _, f := range foreign {
		if _, held := ps.held[f.seq]; held {
			continue
		}
		if _, known := ps.foreign[f.seq]; known {
			continue
		}
		ps.foreign[f.seq] = f.key
		st := s.keyState(ps, f.key)
		st.foreign++
	}
	s.onOpen(p, gen)
}

// resolveForeign ends the wait for a foreign message of ps; its key goes
// on once it waits for no other.
func (s *keyedScheduler) resolveForeign(ps *partState, seq uint64) {
	key, ok := ps.foreign[seq]
	if !ok {
		return
	}
	delete(ps.foreign, seq)
	if st := s.keys[key]; st != nil {
		st.foreign--
		s.markReady(key, st)
	}
}

// keyState is key's state, created (in partition ps) when it has none.
func (s *keyedScheduler) keyState(ps *partState, key string) *keyState {
	st := s.keys[key]
	if st == nil {
		st = &keyState{}
		s.keys[key] = st
		ps.keys[key] = struct{}{}
	}
	return st
}

// enqueue puts km behind the earlier messages of its key.
func (s *keyedScheduler) enqueue(ps *partState, km *kmsg) {
	st := s.keyState(ps, km.key)
	// In stream order: only a redelivery can come after a later message.
	i := len(st.queue)
	for i > 0 && st.queue[i-1].seq > km.seq {
		i--
	}
	st.queue = slices.Insert(st.queue, i, km)
	s.markReady(km.key, st)
}

func (s *keyedScheduler) markReady(key string, st *keyState) {
	if st.ready || st.busy || !st.retryAt.IsZero() || st.foreign > 0 || len(st.queue) == 0 {
		return
	}
	st.ready = true
	s.readyQ = append(s.readyQ, key)
}

// dispatch starts batches while workers are free and keys are ready. A
// batch that would not be full waits, at most partialHold, while another
// batch is in flight, so that batches grow with the rate (as in the
// unkeyed runner, runner.go).
func (s *keyedScheduler) dispatch(ctx context.Context) {
	s.releaseDue()
	for s.inflight < s.concurrency && len(s.readyQ) > 0 {
		if s.inflight > 0 && s.readyCount() < s.batchSize && time.Since(s.oldestReady()) < partialHold {
			return
		}
		b := s.build()
		if len(b.msgs) == 0 {
			return
		}
		s.inflight++
		go s.apply(ctx, b)
	}
}

func (s *keyedScheduler) readyCount() int {
	n := 0
	for _, k := range s.readyQ {
		n += len(s.keys[k].queue)
		if n >= s.batchSize {
			break
		}
	}
	return n
}

func (s *keyedScheduler) oldestReady() time.Time {
	oldest := time.Now()
	for _, k := range s.readyQ {
		if q := s.keys[k].queue; len(q) > 0 && q[0].progress.Before(oldest) {
			oldest = q[0].progress
		}
	}
	return oldest
}

// build takes whole key queues from the ready list, oldest key first,
// into one batch of at most batchSize; a key that does not fit whole
// gives what fits and stays busy with the rest queued behind.
func (s *keyedScheduler) build() *kbatch {
	b := &kbatch{}
	for len(s.readyQ) > 0 && len(b.msgs) < s.batchSize {
		key := s.readyQ[0]
		s.readyQ = s.readyQ[1:]
		st := s.keys[key]
		st.ready = false
		n := min(len(st.queue), s.batchSize-len(b.msgs))
		b.msgs = append(b.msgs, st.queue[:n]...)
		st.queue = slices.Clone(st.queue[n:])
		st.busy = true
	}
	return b
}

// apply runs on its own goroutine: one batch, then its completion back
// to the scheduler.
func (s *keyedScheduler) apply(ctx context.Context, b *kbatch) {
	msgs := make([]jetstream.Msg, len(b.msgs))
	for i, km := range b.msgs {
		msgs[i] = km.asDelivered()
	}
	stop := keepInProgress(msgs, s.progressInterval())
	b.actions = s.processSafely(ctx, msgs, stop)
	s.events <- schedEvent{kind: evDone, batch: b}
}

// processSafely turns a panic outside the handlers (theirs are caught
// per event) into a retry of the whole batch, as the unkeyed runner does.
func (s *keyedScheduler) processSafely(ctx context.Context, msgs []jetstream.Msg, stop func()) (actions []action) {
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("batch processing panicked; retrying", "consumer", s.name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			actions = make([]action, len(msgs))
			for i := range actions {
				actions[i] = action{kind: nak, delay: 5 * time.Second}
			}
		}
	}()
	return s.process(ctx, msgs)
}

// onBatchDone settles what was applied or dead-lettered and puts what
// failed back at the head of its key, blocked until its retry time.
func (s *keyedScheduler) onBatchDone(b *kbatch) {
	s.inflight--
	now := time.Now()
	back := map[string][]*kmsg{}
	for i, km := range b.msgs {
		st := s.keys[km.key]
		switch a := b.actions[i]; a.kind {
		case ack, term:
			s.settle(km, a.kind)
			if a.kind == term {
				h := km.msg.Headers()
				s.dead[km.key] = deadRef{partition: km.partition, key: km.key, MessageKey: store.MessageKey{
					Source: h.Get(stream.HeaderSource), EventID: h.Get(stream.HeaderEventID), StreamSeq: km.seq}}
			} else if d, ok := s.dead[km.key]; ok && d.StreamSeq < km.seq {
				delete(s.dead, km.key)
				if s.passed != nil {
					go s.passed(context.Background(), d, km)
				}
			}
		default: // nak (failed: retry later) or hold (behind one that failed)
			if a.kind == nak {
				km.retries++
				if st.retryAt.IsZero() {
					st.retryAt = now.Add(a.delay)
				}
			} else if st.retryAt.IsZero() {
				st.retryAt = now // held behind one that was dead-lettered: go on
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
		if failed := back[km.key]; len(failed) > 0 {
			st.queue = append(failed, st.queue...)
		}
		s.markReady(km.key, st)
		s.forget(km.key, km.partition)
	}
	s.finishDrains()
}

// settle acks or terminates km.
func (s *keyedScheduler) settle(km *kmsg, kind actionKind) {
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
	if ps := s.parts[km.partition]; ps != nil {
		if _, ok := ps.held[km.seq]; ok {
			delete(ps.held, km.seq)
			s.unsettled[km.partition].Add(-1)
		}
	}
}

// forget drops a key that has nothing here any more.
func (s *keyedScheduler) forget(key string, p int) {
	st := s.keys[key]
	if st == nil || st.busy || st.foreign > 0 || len(st.queue) > 0 {
		return
	}
	delete(s.keys, key)
	if ps := s.parts[p]; ps != nil {
		delete(ps.keys, key)
	}
}

// releaseDue moves blocked keys whose retry time has come to the ready
// list.
func (s *keyedScheduler) releaseDue() {
	now := time.Now()
	for key, st := range s.keys {
		if !st.retryAt.IsZero() && !now.Before(st.retryAt) {
			st.retryAt = time.Time{}
			s.markReady(key, st)
		}
	}
}

// nextWake is how long the loop may sleep: until the next retry, or the
// end of a partial batch's hold.
func (s *keyedScheduler) nextWake() time.Duration {
	next := time.Hour
	now := time.Now()
	for _, st := range s.keys {
		if !st.retryAt.IsZero() {
			next = min(next, st.retryAt.Sub(now))
		}
	}
	if len(s.readyQ) > 0 && s.inflight > 0 && s.inflight < s.concurrency {
		next = min(next, partialHold-time.Since(s.oldestReady()))
	}
	return next
}

// finishDrains completes the drain of every draining partition that has
// no batch in flight and nothing left it could apply: what remains
// (blocked keys, staged messages) is nak'd in stream order, so the member
// that takes the partition over gets it at once, before anything newer.
func (s *keyedScheduler) finishDrains() {
	for p, ps := range s.parts {
		if !ps.draining || !s.drained(ps) {
			continue
		}
		var rest []*kmsg
		for key := range ps.keys {
			rest = append(rest, s.keys[key].queue...)
			delete(s.keys, key)
		}
		rest = append(rest, ps.staged...)
		slices.SortFunc(rest, func(a, b *kmsg) int { return cmp.Compare(a.seq, b.seq) })
		for _, km := range rest {
			s.settle(km, nak)
		}
		for key, d := range s.dead {
			if d.partition == p {
				delete(s.dead, key)
			}
		}
		delete(s.parts, p)
		close(ps.done)
	}
}

// drained reports whether ps has no batch in flight and no key it could
// still apply now.
func (s *keyedScheduler) drained(ps *partState) bool {
	for key := range ps.keys {
		st := s.keys[key]
		if st.busy || (st.retryAt.IsZero() && st.foreign == 0 && len(st.queue) > 0) {
			return false
		}
	}
	return true
}

// keepInProgress sends in-progress acks for the queued and staged
// messages that had none for half an interval (batches in flight have
// their own, see keepInProgress in runner.go).
func (s *keyedScheduler) keepInProgress() {
	now := time.Now()
	due := now.Add(-s.progressInterval() / 2)
	touch := func(km *kmsg) {
		if km.progress.Before(due) {
			_ = km.msg.InProgress() // best effort; a redelivery is dropped or is a duplicate
			km.progress = now
		}
	}
	for _, st := range s.keys {
		for _, km := range st.queue {
			touch(km)
		}
	}
	for _, ps := range s.parts {
		for _, km := range ps.staged {
			touch(km)
		}
	}
}

func (s *keyedScheduler) progressInterval() time.Duration {
	if interval := s.ackWait / 3; interval > 0 {
		return interval
	}
	return 10 * time.Second
}

// asDelivered is the message as the apply sees it: with the retries made
// here counted in its delivery count, so that the backoff grows, a
// failure counter is cleared when it applies, and the dead letter says
// how many attempts there were.
func (km *kmsg) asDelivered() jetstream.Msg {
	if km.retries == 0 {
		return km.msg
	}
	return retriedMsg{Msg: km.msg, extra: km.retries}
}

// retriedMsg is a message retried here extra times.
type retriedMsg struct {
	jetstream.Msg
	extra uint64
}

func (m retriedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.Msg.Metadata()
	if err != nil {
		return md, err
	}
	c := *md
	c.NumDelivered += m.extra
	return &c, nil
}
