package delivery

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
)

// Reading the endpoint's durable. Only the instance holding the
// endpoint's lease reads it, and the durable's pinned priority group
// makes JetStream deliver to one reader at a time besides. Pulls are
// short (pullWait, a third of the pin's TTL), so a live reader renews its
// pin well inside the TTL even when nothing comes; a reader with no room
// for more still sends a pull that asks for no byte (a heartbeat pull:
// it keeps the pin and takes nothing).
//
// What the reader learns from each message (as the consumer side's
// partitions do, internal/engine): the durable's delivery sequence
// counts every delivery whoever got it, so a gap means deliveries went
// elsewhere or were lost in flight, and a new pin id means the pin moved.
// After a gap with a new pin, what this reader held may be another's now:
// it is dropped (fenced), never attempted here again, and comes back
// through JetStream. An ordered endpoint stages what it reads after its
// first delivery, a gap or a fence (a takeover gate) until JetStream
// counts no more unacked messages than it holds itself: then nothing
// older is held elsewhere, and what it staged is dispatched in stream
// order. A reader that died holding messages lets the gate open ack_wait
// after its last InProgress.

// pullBytes bounds the bytes one pull brings in (the consumer side's
// bound per partition): 256 events of a megabyte would be a quarter of a
// gigabyte in memory.
const pullBytes = 16 << 20

func (s *Sender) read(ctx context.Context, work *conc.WaitGroup) {
	delay := 100 * time.Millisecond
	warned := false
	for ctx.Err() == nil {
		s.mu.Lock()
		room, probe := s.roomLocked()
		gated := s.gated
		s.mu.Unlock()
		wait := s.m.t.pullWait
		if gated {
			wait = min(wait, gateLook)
		}
		opts := []jetstream.FetchOpt{jetstream.FetchPriorityGroup(priorityGroup)}
		n := room
		if room <= 0 {
			if s.waitRoom(ctx, s.m.t.pinnedTTL/3) || ctx.Err() != nil {
				continue
			}
			// A heartbeat pull: renews the pin, takes nothing.
			n, wait = 1, min(wait, time.Second)
			opts = append(opts, jetstream.FetchMaxBytes(1))
		} else {
			opts = append(opts, jetstream.FetchMaxBytes(pullBytes))
			if probe {
				s.mu.Lock()
				s.probeAt = time.Now()
				s.mu.Unlock()
			}
		}
		opts = append(opts, jetstream.FetchMaxWait(wait))
		batch, err := s.cons.Fetch(n, opts...)
		if err == nil {
			for m := range batch.Messages() {
				s.arrive(ctx, work, m)
			}
			err = batch.Error()
		}
		switch {
		case err == nil, errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrNoMessages):
		case errors.Is(err, jetstream.ErrPinIDMismatch):
			// The pin lapsed or moved: the next pull asks for a new one,
			// and its first delivery tells whether anything went elsewhere.
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			s.log.Warn("delivery: the endpoint's durable is gone; creating it again", "err", err)
			if err := s.ensure(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("delivery: create the endpoint's durable", "err", err)
				sleep(ctx, delay)
			}
			continue
		default:
			if ctx.Err() != nil {
				return
			}
			if !warned {
				s.log.Warn("delivery: pull failed; retrying", "err", err, "retry_in", delay)
				warned = true
			}
			sleep(ctx, delay)
			delay = min(2*delay, 5*time.Second)
			continue
		}
		delay, warned = 100*time.Millisecond, false
		s.look(ctx, work)
	}
}

// roomLocked is how many more live deliveries the reader may take now,
// and whether that is the breaker's probe. Unordered: twice the
// concurrency, less what is held and the rows of Postgres being sent, so
// what waits for a slot starts within one attempt's timeout, well inside
// its ack wait (and the heartbeat keeps it besides); a pull waits until
// it can take a quarter of that, so reads come in batches. Ordered: the
// window. Rate-limited: what the rate sends in half an ack wait, so
// nothing read waits for the limiter until it is redelivered. While the
// last attempts all failed (the breaker), one probe per probe interval.
func (s *Sender) roomLocked() (int, bool) {
	if s.disabled {
		return 0, false
	}
	held := len(s.held)
	var n, window int
	if s.e.Ordered {
		if s.gated {
			// Staged deliveries do not count: the pulls that bring back
			// what another reader held must go on.
			held -= len(s.buffer)
		}
		window = max(orderedWindow, s.e.Concurrency)
		n = window - held
	} else {
		window = 2 * s.e.Concurrency
		n = window - held - len(s.pgBusy)
	}
	if s.limiter != nil {
		window = min(window, s.rateAhead)
		n = min(n, s.rateAhead-held)
	}
	if n < window/4 && held > 0 {
		n = 0
	}
	if s.fails >= breakerFailures && n > 0 {
		if time.Since(s.probeAt) < s.probeEvery() {
			return 0, false
		}
		return 1, true
	}
	return n, false
}

// probeEvery is how often an endpoint whose last attempts all failed is
// sent a new event: the schedule's first wait, at least a second and at
// most a minute.
func (s *Sender) probeEvery() time.Duration {
	d := time.Second
	if len(s.e.Retry) > 1 {
		d = s.e.Retry[1]
	}
	return min(max(d, s.m.t.probeMin), time.Minute)
}

// waitRoom waits for room to free, at most d; true when it did.
func (s *Sender) waitRoom(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		case <-s.roomCh:
			s.mu.Lock()
			room, _ := s.roomLocked()
			s.mu.Unlock()
			if room > 0 {
				return true
			}
		}
	}
}

// arrive takes one message in.
func (s *Sender) arrive(ctx context.Context, work *conc.WaitGroup, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing can be done with it.
		s.log.Warn("delivery: message without metadata; terminated", "err", err)
		_ = m.TermWithReason("no metadata")
		return
	}
	h := m.Headers()
	seq := md.Sequence.Stream
	it := &item{seq: seq, key: s.keyOf(h, m.Subject()), eventID: eventID(h, seq), subject: m.Subject(), msg: m, nd: md.NumDelivered,
		touched: time.Now()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observeLocked(md.Sequence.Consumer, h.Get(pinHeader))
	it.epoch = s.epoch
	if old, ok := s.held[seq]; ok {
		// Delivered again while held (a heartbeat came too late): the
		// newest delivery is the one to ack.
		old.msg, old.nd, old.touched = m, md.NumDelivered, time.Now()
		return
	}
	s.held[seq] = it
	if s.gated {
		s.buffer = append(s.buffer, it)
		return
	}
	s.dispatchLocked(ctx, work, it)
}

// observeLocked fences and gates as a delivery's sequence and pin say.
func (s *Sender) observeLocked(dseq uint64, pin string) {
	fresh := s.dseq == 0
	gap := !fresh && dseq != s.dseq+1
	repinned := pin != s.pin
	s.dseq, s.pin = dseq, pin
	if gap && repinned {
		s.fenceLocked()
	}
	if s.e.Ordered && (fresh || gap) && !s.gated {
		s.gated, s.gateSince, s.gateLog = true, time.Now(), false
	}
}

// fenceLocked drops the live deliveries held here that no attempt has
// started: another reader may hold them now. They are not acked, naked or
// kept in progress; they come back through JetStream.
func (s *Sender) fenceLocked() {
	s.epoch++
	dropped := 0
	for seq, it := range s.held {
		if !it.inflight {
			delete(s.held, seq)
			dropped++
		}
	}
	for _, ks := range s.keys {
		ks.mem = slices.DeleteFunc(ks.mem, func(it *item) bool { return !it.inflight })
	}
	s.buffer = nil
	if dropped > 0 {
		s.log.Info("delivery: the pin moved while deliveries were held; dropped them for the reader that has them now", "dropped", dropped)
	}
}

// dispatchLocked starts a live delivery: unordered at once, ordered on
// its key's worker.
func (s *Sender) dispatchLocked(ctx context.Context, work *conc.WaitGroup, it *item) {
	if !s.e.Ordered {
		work.Go(func() { s.runLive(ctx, it) })
		return
	}
	ks := s.keyLocked(it.key)
	i, _ := slices.BinarySearchFunc(ks.mem, it.seq, func(x *item, seq uint64) int { return cmp.Compare(x.seq, seq) })
	ks.mem = slices.Insert(ks.mem, i, it)
	s.startKeyLocked(ctx, work, it.key, ks)
}

// look takes a look at the takeover gate, between two pulls (nothing is
// on its way to this reader, every message read is counted in held).
func (s *Sender) look(ctx context.Context, work *conc.WaitGroup) {
	s.mu.Lock()
	gated := s.gated
	s.mu.Unlock()
	if !gated {
		return
	}
	if h := s.m.hooks.gateInfo; h != nil {
		h()
	}
	info, err := s.cons.Info(ctx)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// What is held is counted after JetStream answered, never before: a
	// delivery settled meanwhile leaves held before JetStream's count
	// (release), so the count here is never above what JetStream counted
	// of it, and a message held elsewhere always keeps the gate shut.
	here := len(s.held)
	if info.NumAckPending > here {
		if !s.gateLog && time.Since(s.gateSince) > 2*time.Second {
			s.gateLog = true
			s.log.Info("delivery: endpoint taken over; waiting for the events another reader held (they return after ack_wait)",
				"elsewhere", info.NumAckPending-here, "ack_wait", s.ackWait)
		}
		return
	}
	if s.gateLog {
		s.log.Info("delivery: endpoint taken over", "waited", time.Since(s.gateSince).Round(time.Millisecond))
	}
	buffer := s.buffer
	s.buffer, s.gated = nil, false
	slices.SortFunc(buffer, func(a, b *item) int { return cmp.Compare(a.seq, b.seq) })
	for _, it := range buffer {
		if s.held[it.seq] == it {
			s.dispatchLocked(ctx, work, it)
		}
	}
}
