package delivery

import (
	"context"
	"slices"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/hookbridge/hookbridge/internal/store"
)

// Ordered endpoints: one worker per key at a time delivers the key's
// events in stream order, one at a time. A key's events are its rows in
// Postgres (a failed event waiting for its next attempt, the events
// parked behind it, a requeue) and the live messages held here; the
// first by stream sequence goes first. While a key has a row in
// Postgres, its live messages are parked there too (written, then
// acked), so a failing key holds neither memory nor a place in the
// durable's max ack pending, and only its own events wait. A key whose
// next attempt is more than keyNap away has no worker: the Postgres loop
// wakes it when it is due.

// startKeyLocked starts key's worker unless it runs.
func (s *Sender) startKeyLocked(ctx context.Context, work *conc.WaitGroup, key string, ks *keyState) {
	if ks.running || s.stopping {
		return
	}
	ks.running = true
	work.Go(func() { s.runKey(ctx, key) })
}

// wakeKey starts the worker of a key with a row in Postgres that is due.
func (s *Sender) wakeKey(ctx context.Context, work *conc.WaitGroup, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.keyLocked(key)
	if !ks.pg {
		ks.pg = true
		ks.gen++
	}
	s.startKeyLocked(ctx, work, key, ks)
}

// runKey delivers key's events until it has none left here, its next
// attempt is far off, or the sender stops.
func (s *Sender) runKey(ctx context.Context, key string) {
	for {
		s.mu.Lock()
		ks := s.keys[key]
		if ks == nil {
			s.mu.Unlock()
			return
		}
		pg, gen := ks.pg, ks.gen
		mem := slices.Clone(ks.mem)
		s.mu.Unlock()
		if ctx.Err() != nil {
			s.keyDone(key, true)
			return
		}
		switch {
		case pg && len(mem) > 0:
			// Behind the key's rows in Postgres: parked there.
			if !s.park(ctx, key, mem) && !sleep(ctx, s.m.t.prepare) {
				s.keyDone(key, true)
				return
			}
		case pg:
			if stop := s.keyHead(ctx, key, gen); stop {
				return
			}
		case len(mem) > 0:
			it := mem[0]
			out, d := s.deliver(ctx, it)
			switch out {
			case settled:
				s.forget(key, it)
			case notStarted:
				if !s.pause(ctx) {
					s.keyDone(key, true)
					return
				}
			case later:
				if !sleep(ctx, d) {
					s.keyDone(key, true)
					return
				}
			}
		default:
			if s.keyDone(key, false) {
				return
			}
		}
	}
}

// keyHead delivers the first of key's rows in Postgres when it is due
// soon; stop says the worker is done (the key is left to the Postgres
// loop, or the sender stops).
func (s *Sender) keyHead(ctx context.Context, key string, gen uint64) (stop bool) {
	row, dueIn, ok, err := store.DeliveryPendingHead(ctx, s.m.opts.Pool, s.e.Name, key)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("delivery: read a key's next event; retrying", "err", err, "retry_in", s.m.t.prepare)
		}
		if !sleep(ctx, s.m.t.prepare) {
			s.keyDone(key, true)
			return true
		}
		return false
	}
	if !ok {
		s.mu.Lock()
		if ks := s.keys[key]; ks.gen == gen {
			ks.pg = false
		}
		s.mu.Unlock()
		return false
	}
	// A row parked behind one that went is the key's first now: due.
	// The wait is the database's: it wrote the row's time with its own
	// clock, which this instance's may not match.
	if row.NextAttemptAt != nil {
		if dueIn > keyNap {
			return s.keyDone(key, false)
		} else if !sleep(ctx, dueIn) {
			s.keyDone(key, true)
			return true
		}
	}
	it := s.rowItem(row)
	for {
		out, d := s.deliver(ctx, it)
		switch out {
		case notStarted:
			if !s.pause(ctx) {
				s.keyDone(key, true)
				return true
			}
		case later:
			if !sleep(ctx, d) {
				s.keyDone(key, true)
				return true
			}
			if it.failed != nil {
				continue // only the record of an answer is missing
			}
		}
		return false
	}
}

// pause waits a moment after an attempt could not start, and says
// whether the worker should go on: the lease lapses for a moment when a
// renewal is slow; a stop ends the worker.
func (s *Sender) pause(ctx context.Context) bool {
	if !sleep(ctx, 200*time.Millisecond) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.stopping && !s.disabled
}

// forget removes a settled live delivery from its key.
func (s *Sender) forget(key string, it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ks := s.keys[key]; ks != nil {
		ks.mem = slices.DeleteFunc(ks.mem, func(x *item) bool { return x == it })
	}
}

// keyDone ends key's worker unless events of the key came meanwhile
// (then it goes on: false). stopping ends it regardless. A key with
// nothing left here is forgotten.
func (s *Sender) keyDone(key string, stopping bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.keys[key]
	if !stopping && !s.stopping && len(ks.mem) > 0 {
		return false
	}
	ks.running = false
	if !ks.pg && len(ks.mem) == 0 {
		delete(s.keys, key)
	}
	return true
}

// park writes live deliveries of key to Postgres behind the key's rows
// there, as the endpoint's owner, and acks them. false: not written (the
// database is unreachable, or the lease ran out).
func (s *Sender) park(ctx context.Context, key string, items []*item) bool {
	rows := make([]store.DeliveryPending, 0, len(items))
	for _, it := range items {
		rows = append(rows, store.DeliveryPending{StreamSeq: it.seq, EventID: it.eventID, Subject: it.subject, OrderingKey: key})
	}
	held, _, err := store.DeliveryPendingPark(ctx, s.m.opts.Pool, s.e.Name, s.m.id, rows)
	if err != nil || !held {
		if err != nil && ctx.Err() == nil {
			s.log.Warn("delivery: park events behind their key's failing one; retrying", "events", len(items), "err", err)
		}
		return false
	}
	for _, it := range items {
		s.forget(key, it)
		s.ack(it)
	}
	return true
}

// rowItem is the delivery of a row Postgres tracks.
func (s *Sender) rowItem(row store.DeliveryPending) *item {
	r := row
	return &item{seq: r.StreamSeq, key: r.OrderingKey, eventID: r.EventID, subject: r.Subject, row: &r, attempts: r.Attempts}
}
