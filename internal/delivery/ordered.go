package delivery

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
)

// Ordered endpoints: the sender keeps at most one event per key being
// delivered and parks the later events of that key, in stream order,
// until it is acked or dead-lettered. Retries of an ordered event are
// waited for here, not with NakWithDelay: a Nak'd event would leave this
// process's view, and a later event of its key, already read, could pass
// it. Held events are kept delivered to this sender with InProgress.
//
// A takeover (this instance gets the pin, at start or after another
// reader stopped) opens a window of one ack wait before anything is sent:
// the events the previous reader held expire in that time and JetStream
// redelivers them ahead of new ones; the window's events are then
// dispatched sorted by stream sequence, so an event read after a
// takeover cannot pass an earlier one of its key the previous reader
// still held.

// pinHeader carries the pin id on messages of a pinned priority group.
const pinHeader = "Nats-Pin-Id"

func (s *Sender) keyOf(m jetstream.Msg) string {
	if s.e.KeyHeader != "" {
		if k := m.Headers().Get(s.e.KeyHeader); k != "" {
			return "h:" + k
		}
	}
	return "s:" + m.Subject()
}

func (s *Sender) dispatchOrdered(ctx context.Context, wg *conc.WaitGroup, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		s.log.Warn("delivery: message without metadata", "err", err)
		_ = m.Term()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pin := m.Headers().Get(pinHeader); pin != "" && pin != s.pin {
		s.pin = pin
		if !s.buffering {
			s.buffering = true
			wg.Go(func() { s.closeWindow(ctx, wg) })
		}
	}
	seq := md.Sequence.Stream
	if h, ok := s.held[seq]; ok {
		h.msg = m // redelivered while held (a missed heartbeat): keep the newest
		return
	}
	h := &heldMsg{msg: m, seq: seq, key: s.keyOf(m)}
	s.held[seq] = h
	if s.buffering {
		s.buffer = append(s.buffer, h)
		return
	}
	s.enqueueLocked(ctx, wg, h)
}

// closeWindow ends a takeover window after one ack wait and dispatches
// what it read in stream order.
func (s *Sender) closeWindow(ctx context.Context, wg *conc.WaitGroup) {
	t := time.NewTimer(s.ackWait + time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sortHeld(s.buffer)
	for _, h := range s.buffer {
		s.enqueueLocked(ctx, wg, h)
	}
	s.buffer, s.buffering = nil, false
}

// enqueueLocked starts h's key or parks h behind the event of its key
// being delivered. Callers hold s.mu.
func (s *Sender) enqueueLocked(ctx context.Context, wg *conc.WaitGroup, h *heldMsg) {
	if q, busy := s.keys[h.key]; busy {
		s.keys[h.key] = append(q, h)
		sortHeld(s.keys[h.key]) // redeliveries may arrive after later events
		return
	}
	s.keys[h.key] = []*heldMsg{}
	wg.Go(func() { s.runKey(ctx, h) })
}

// runKey delivers h, then each event parked behind it, until its key has
// none left or the sender stops.
func (s *Sender) runKey(ctx context.Context, h *heldMsg) {
	for h != nil {
		if !s.deliverOrdered(ctx, h) {
			return // stopping: what is held is redelivered to the next reader
		}
		s.mu.Lock()
		delete(s.held, h.seq)
		q := s.keys[h.key]
		if len(q) == 0 {
			delete(s.keys, h.key)
			h = nil
		} else {
			h, s.keys[h.key] = q[0], q[1:]
		}
		s.mu.Unlock()
	}
}

// deliverOrdered attempts h on the schedule until it succeeds or is
// dead-lettered (true), or the sender stops (false).
func (s *Sender) deliverOrdered(ctx context.Context, h *heldMsg) bool {
	s.mu.Lock()
	m := h.msg
	s.mu.Unlock()
	md, err := m.Metadata()
	if err != nil {
		return true
	}
	// A redelivery (after a crash or a takeover) counts the attempts the
	// previous reader made.
	for n := int(md.NumDelivered); ; n++ {
		res, ok := s.attempt(ctx, m, md, n)
		if !ok {
			return false
		}
		s.mu.Lock()
		m = h.msg
		s.mu.Unlock()
		switch {
		case res.success():
			s.ack(ctx, m)
			return true
		case n >= len(s.e.Retry):
			// The key stays held until the dead letter is recorded.
			for !s.deadLetter(ctx, m, md, n, res) {
				if !sleep(ctx, deadLetterRetry) {
					return false
				}
			}
			return true
		}
		if !sleep(ctx, s.nextDelay(n, res)) {
			return false
		}
	}
}

// sleep waits d, or less when ctx ends first (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// heartbeat keeps every held event delivered to this sender: three
// InProgress per ack wait, so one lost to a slow moment does not expire it.
func (s *Sender) heartbeat(ctx context.Context) {
	t := time.NewTicker(s.ackWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		for _, h := range s.held {
			_ = h.msg.InProgress()
		}
		s.mu.Unlock()
	}
}
