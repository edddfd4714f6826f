package delivery

import (
	"context"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/hookbridge/hookbridge/internal/store"
)

// The Postgres loop delivers what Postgres tracks for the endpoint when
// it is due: failed deliveries' next attempts, requeues and replays, and
// on an ordered endpoint the keys whose next event is due (their workers
// take it from there). It sleeps until the next row is due (at most
// pgPoll), or until it is woken: a failure it wrote, a requeue or a
// replay made elsewhere (the notification).

// dueBatch bounds the rows one look at an ordered endpoint takes.
const dueBatch = 256

func (s *Sender) pgLoop(ctx context.Context, work *conc.WaitGroup) {
	warned := false
	for ctx.Err() == nil {
		d, err := s.pgRound(ctx, work)
		switch {
		case err != nil && ctx.Err() == nil:
			if !warned {
				s.log.Warn("delivery: read the deliveries Postgres tracks; retrying", "err", err, "retry_in", s.m.t.prepare)
				warned = true
			}
			d = s.m.t.prepare
		case err == nil:
			warned = false
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-s.wakePG:
		case <-t.C:
		}
		t.Stop()
	}
}

// pgRound starts what is due and returns how long to sleep.
func (s *Sender) pgRound(ctx context.Context, work *conc.WaitGroup) (time.Duration, error) {
	s.mu.Lock()
	idle := s.disabled || s.stopping
	busy := len(s.pgBusy)
	// Rows whose delivery ends from now on may still be due in what the
	// query below reads: they are not started again in this look.
	s.pgLooks++
	look := s.pgLooks
	for seq, at := range s.pgEnded {
		if at < look {
			delete(s.pgEnded, seq)
		}
	}
	room := 2*max(1, s.e.Concurrency) - busy
	s.mu.Unlock()
	if idle || !s.leased() {
		return time.Second, nil
	}
	if !s.e.Ordered && room <= 0 {
		// As many rows are prepared or in flight as the live deliveries'
		// window (reader.go): the rest wait in Postgres, not in memory.
		// Each row's end wakes the loop. (The live deliveries held do not
		// count here, since their end does not wake it; the reader counts
		// these rows against its own window instead.)
		return s.m.t.pgPoll, nil
	}
	pool, name := s.m.opts.Pool, s.e.Name
	if err := s.reloadKeys(ctx); err != nil {
		return 0, err
	}
	limit := dueBatch
	if !s.e.Ordered {
		// As many as may start, besides those already being delivered
		// (still due, they come first).
		limit = room + busy
	}
	rows, err := store.DeliveryPendingDue(ctx, pool, name, limit)
	if err != nil {
		return 0, err
	}
	started := 0
	for _, r := range rows {
		if s.e.Ordered {
			s.wakeKey(ctx, work, r.OrderingKey)
			continue
		}
		s.mu.Lock()
		if !s.pgBusy[r.StreamSeq] && s.pgEnded[r.StreamSeq] != look && !s.stopping && started < room {
			s.pgBusy[r.StreamSeq] = true
			started++
			it := s.rowItem(r)
			work.Go(func() { s.runRow(ctx, it) })
		}
		s.mu.Unlock()
	}
	if len(rows) == limit && (s.e.Ordered || started > 0) {
		// More may be due: look again once these are under way.
		return 50 * time.Millisecond, nil
	}
	d, ok, err := store.DeliveryPendingNextDue(ctx, pool, name)
	if err != nil {
		return 0, err
	}
	if !ok {
		return s.m.t.pgPoll, nil
	}
	// What is due now is under way (its end wakes the loop, as does a key
	// whose worker leaves it for later); the next look is when the next
	// row becomes due.
	return min(max(d, 50*time.Millisecond), s.m.t.pgPoll), nil
}

// runRow delivers one row of an unordered endpoint.
func (s *Sender) runRow(ctx context.Context, it *item) {
	defer func() {
		s.mu.Lock()
		delete(s.pgBusy, it.seq)
		s.pgEnded[it.seq] = s.pgLooks
		s.mu.Unlock()
		poke(s.roomCh)
		poke(s.wakePG)
	}()
	out, d := s.deliver(ctx, it)
	for out == later && sleep(ctx, d) {
		out, d = s.deliver(ctx, it)
	}
}
