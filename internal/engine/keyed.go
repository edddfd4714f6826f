package engine

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
//	blocked  its oldest message failed and waits for its retry time, or
//	         another member may still hold an older message of it
//	         (foreign); later messages queue behind it, other keys go on
//
// A failed event is retried here, not nak'd: a nak would let JetStream
// deliver the key's later events before it. Its message stays unacked
// (in-progress acks keep it) until it applies or is dead-lettered.

// kmsg is a message of a keyed consumer in this instance's hands.
type kmsg struct {
	msg       jetstream.Msg
	partition int
	seq       uint64
	// key is its source and ordering key ([orderKey]).
	key string
	// gen is the partition's pin generation it arrived under.
	gen uint64
	// retries counts the failed applies retried here; JetStream's
	// delivery count does not see them (see retriedMsg).
	retries  uint64
	busy     bool      // in a batch being applied
	progress time.Time // last in-progress ack, or arrival
	// postponed: its handler said it needs a later event of its key
	// first; it is tried again right after each later event applies.
	postponed bool
	// due: postponed, and a message of its key applied since it was last
	// tried; it is tried again before any later message of the key.
	due bool
}

// keyState is one ordering key's place in the scheduler.
type keyState struct {
	partition int
	queue     []*kmsg   // not yet in a batch, in stream order
	busy      bool      // a batch with messages of this key is in flight
	retryAt   time.Time // set while blocked after a failure
	// forLater: blocked only because every queued message is postponed;
	// the next message of the key to arrive ends the block, and so does a
	// postponed one falling due.
	forLater bool
	ready    bool // in the ready list
	readyAt  time.Time
	// foreign counts the key's messages another member may still hold
	// unapplied (see [keyedScheduler.openForeign]).
	foreign int
	// parked is how many of queue wait for foreign messages (all of it
	// while foreign > 0), as counted in partCounters.parked.
	parked int
}

// partState is one partition this instance serves.
type partState struct {
	keys map[string]struct{}
	// held are its unsettled messages here, by stream sequence; a second
	// delivery of one of them (an ack_wait expiry) is dropped.
	held map[uint64]*kmsg
	// gen is the pin generation (see [keyedScheduler.gate]); while gated,
	// messages are staged, not scheduled.
	gen    uint64
	gated  bool
	staged []*kmsg
	// foreign are the messages (seq: key) another member may still hold
	// unapplied.
	foreign  map[uint64]string
	draining bool
	done     chan struct{}
}

// kbatch is a batch in flight.
type kbatch struct {
	msgs    []*kmsg
	actions []action
}

// foreignMsg is a message of a partition that another member held, not
// applied, when this member took the partition over.
type foreignMsg struct {
	seq uint64
	key string
}

// partCounters count a partition's messages here, for the takeover check
// and the feeder's room; read without the scheduler's goroutine.
type partCounters struct {
	arrived atomic.Uint64 // distinct messages taken in, ever
	settled atomic.Uint64 // of those, acked, terminated, nak'd or dropped
	// parked are held messages staged behind a gate, or whose keys wait
	// for messages another member held: they do not count against the
	// partition's window, or a window full of them would stop the pulls
	// that bring those messages back (the server redelivers them first,
	// even at MaxAckPending, which bounds what parks).
	parked atomic.Int64
	// inbound are messages handed over and not yet taken in: they count
	// against the window before they count as arrived.
	inbound atomic.Int64
	// foreign is how many messages another member may still hold that
	// keys here wait for (takeover.go).
	foreign atomic.Int64
	room    chan struct{} // signalled whenever one is settled or unparked
}

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

	events   chan schedEvent
	counters []partCounters
	fenced   atomic.Bool
	// fenceEpoch counts the fences (see [keyedScheduler.onFence]).
	fenceEpoch atomic.Uint64
	// gens numbers the gates of every partition (see
	// [keyedScheduler.gate]): a message arrived under an older one than
	// its partition's is from before it.
	gens atomic.Uint64

	// State below is the scheduler goroutine's alone.
	keys     map[string]*keyState
	parts    map[int]*partState
	readyQ   []string
	retries  retryHeap
	inflight int
}

func newKeyedScheduler(name string, partitions, concurrency, batchSize int, ackWait time.Duration, log *slog.Logger) *keyedScheduler {
	s := &keyedScheduler{
		name: name, concurrency: concurrency, batchSize: batchSize, ackWait: ackWait, log: log,
		events:   make(chan schedEvent, 1024),
		counters: make([]partCounters, partitions),
		keys:     map[string]*keyState{},
		parts:    map[int]*partState{},
	}
	for i := range s.counters {
		s.counters[i].room = make(chan struct{}, 1)
	}
	return s
}

// held is how many messages of p are here and not yet settled.
func (s *keyedScheduler) held(p int) int {
	c := &s.counters[p]
	return int(c.arrived.Load() - c.settled.Load())
}

// windowed is how many of p's messages here count against its window:
// those held or on their way in, less those parked.
func (s *keyedScheduler) windowed(p int) int {
	c := &s.counters[p]
	return s.held(p) + int(c.inbound.Load()) - int(c.parked.Load())
}

// waitRoom waits until fewer than limit/2 of p's messages here count
// against its window (or ctx ends; nothing is pulled while fenced) and
// returns the room below limit: a feeder pulls no more than that.
func (s *keyedScheduler) waitRoom(ctx context.Context, p, limit int) int {
	for {
		if n := s.windowed(p); n < limit/2 && !s.fenced.Load() {
			return limit - n
		}
		select {
		case <-s.counters[p].room:
		case <-ctx.Done():
			return 0
		case <-time.After(time.Second): // a fence lifts without a signal
		}
	}
}

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

// dispatch starts batches while workers are free and keys are ready. A
// batch that would not be full waits, at most partialHold, while another
// batch is in flight, so that batches grow with the rate (as in the
// unkeyed runner, runner.go). Nothing starts while fenced.
func (s *keyedScheduler) dispatch(ctx context.Context) {
	s.releaseDue()
	if s.fenced.Load() {
		return
	}
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

// oldestReady is when the key at the head of the ready list became ready:
// keys join the list in that order.
func (s *keyedScheduler) oldestReady() time.Time {
	if len(s.readyQ) == 0 {
		return time.Now()
	}
	return s.keys[s.readyQ[0]].readyAt
}

// build takes whole key queues from the ready list, oldest key first,
// into one batch of at most batchSize; a key that does not fit whole
// gives what fits and stays busy with the rest queued behind. Keys of a
// partition being drained are left for the drain.
func (s *keyedScheduler) build() *kbatch {
	b := &kbatch{}
	for len(s.readyQ) > 0 && len(b.msgs) < s.batchSize {
		key := s.readyQ[0]
		s.readyQ = s.readyQ[1:]
		st := s.keys[key]
		st.ready = false
		if ps := s.parts[st.partition]; ps == nil || ps.draining {
			continue
		}
		take := st.take(s.batchSize - len(b.msgs))
		for _, km := range take {
			km.busy = true
		}
		b.msgs = append(b.msgs, take...)
		st.busy = true
	}
	return b
}

// take removes what a batch with room for n takes of the key's queue, in
// the order to apply it. A postponed message is tried again after each
// later message of its key that applies, before the next one (the
// applier holds the rest of the key behind the one after a postponement,
// [keyHolds]), so:
//   - when postponed messages are due (a message of the key applied since
//     they were last tried), the batch takes them in stream order, and
//     the messages not postponed behind them only when no postponed one
//     stays queued (not due, or no room): none of those may apply before
//     it is tried again;
//   - when the head was postponed and nothing applied since, the first
//     later message that was not postponed, then the postponed ones, each
//     tried again right after it; those left out for room fall due once
//     it applies;
//   - else the head, in stream order (nothing postponed first, or every
//     message postponed and their backoff ran out).
func (st *keyState) take(n int) []*kmsg {
	if out := st.takeDue(n); len(out) > 0 {
		return out
	}
	j := slices.IndexFunc(st.queue, func(km *kmsg) bool { return !km.postponed })
	if j > 0 {
		k := min(j, n-1) // the postponed ones that fit behind the later one
		out := append([]*kmsg{st.queue[j]}, st.queue[:k]...)
		st.queue = slices.Concat(st.queue[k:j], st.queue[j+1:])
		return out
	}
	n = min(n, len(st.queue))
	out := st.queue[:n:n]
	st.queue = slices.Clone(st.queue[n:])
	return out
}

// takeDue takes the due postponed messages, in stream order, and the
// messages not postponed behind them while no postponed one stays
// queued; nil (the queue unchanged) when none is due or none can go.
func (st *keyState) takeDue(n int) []*kmsg {
	if !slices.ContainsFunc(st.queue, func(km *kmsg) bool { return km.due }) {
		return nil
	}
	var out, rest []*kmsg
	behind, stop := false, false
	for _, km := range st.queue {
		switch {
		case stop || len(out) >= n:
			rest = append(rest, km)
		case km.postponed && !km.due:
			// Tried since the last apply: it stays, and nothing later
			// that is not postponed goes past it.
			behind = true
			rest = append(rest, km)
		case km.postponed || !behind:
			out = append(out, km)
		default:
			stop = true
			rest = append(rest, km)
		}
	}
	if len(out) == 0 {
		return nil
	}
	st.queue = rest
	return out
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

// progressInterval is a third of ack_wait: how often a message held here
// gets an in-progress ack.
func (s *keyedScheduler) progressInterval() time.Duration {
	if interval := s.ackWait / 3; interval > 0 {
		return interval
	}
	return 10 * time.Second
}

// keepInProgress sends in-progress acks for the queued and staged
// messages that had none for half an interval (batches in flight have
// their own, see keepInProgress in runner.go).
func (s *keyedScheduler) keepInProgress() {
	now := time.Now()
	due := now.Add(-s.progressInterval() / 2)
	for _, ps := range s.parts {
		for _, km := range ps.held {
			if !km.busy && km.progress.Before(due) {
				_ = km.msg.InProgress() // best effort; a redelivery is dropped or is a duplicate
				km.progress = now
			}
		}
	}
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

// retryHeap orders blocked keys by retry time. Entries whose key has
// moved on (applied, or blocked again for another time) are skipped when
// they come up.
type retryHeap []retryEntry

type retryEntry struct {
	at  time.Time
	key string
}

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h retryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)        { *h = append(*h, x.(retryEntry)) }
func (h *retryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// block holds key back until at.
func (s *keyedScheduler) block(key string, st *keyState, at time.Time) {
	st.retryAt = at
	heap.Push(&s.retries, retryEntry{at: at, key: key})
}

// releaseDue moves blocked keys whose retry time has come to the ready
// list.
func (s *keyedScheduler) releaseDue() {
	now := time.Now()
	for s.retries.Len() > 0 && !now.Before(s.retries[0].at) {
		e := heap.Pop(&s.retries).(retryEntry)
		if st := s.keys[e.key]; st != nil && st.retryAt.Equal(e.at) {
			st.retryAt, st.forLater = time.Time{}, false
			s.markReady(e.key, st)
		}
	}
}

// nextWake is how long the loop may sleep: until the next retry, or the
// end of a partial batch's hold.
func (s *keyedScheduler) nextWake() time.Duration {
	next := time.Hour
	if s.retries.Len() > 0 {
		next = time.Until(s.retries[0].at)
	}
	if len(s.readyQ) > 0 && s.inflight > 0 && s.inflight < s.concurrency {
		next = min(next, partialHold-time.Since(s.oldestReady()))
	}
	return next
}

// sortBySeq sorts messages in stream order.
func sortBySeq(ms []*kmsg) {
	slices.SortFunc(ms, func(a, b *kmsg) int { return cmp.Compare(a.seq, b.seq) })
}
