package loadgen

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/store"
)

// applyTracker measures end-to-end latency: from the moment a webhook was
// sent (or scheduled, at a fixed rate) to the first poll that sees its
// committed inbox row. It polls by primary key for the oldest accepted
// events not yet seen, so each poll is a handful of index lookups however
// large the inbox is; a row is reported at most one poll interval (plus
// the poll's own time) after its commit. When many events are pending
// (the consumer is behind, so latencies are queueing time anyway) the
// interval stretches, up to 100ms, so polling never loads the database
// it measures.
type applyTracker struct {
	pool     *pgxpool.Pool
	consumer string
	source   string
	interval time.Duration
	// window caps the ids looked up per poll. The consumer applies in
	// roughly stream order with at most prefetch (2 × concurrency × batch)
	// messages out of order: 512 with the default concurrency and batch 64.
	window int

	mu        sync.Mutex
	queue     []*pendingEvent          // accepted, in acceptance order; done ones skipped
	byID      map[string]*pendingEvent // until seen (and relayed, with relays)
	added     int
	e2e       *latencies
	seen      int
	firstSeen time.Time
	lastSeen  time.Time
	pollErrs  int
	lastErr   error
	progress  chan struct{} // closed and replaced whenever seen or relayed grows

	// Relayed events (events.> messages caused by our webhooks), when the
	// run subscribes to them (relays).
	relays      bool
	relayedN    int
	lastRelayed time.Time
	relayE2E    *latencies
	early       map[string]time.Time // relayed before the 202 was processed
}

type pendingEvent struct {
	id      string
	n       int
	start   time.Time
	done    bool
	relayed bool
}

func newApplyTracker(pool *pgxpool.Pool, consumer, source string, total int, interval time.Duration, relays bool) *applyTracker {
	return &applyTracker{
		pool: pool, consumer: consumer, source: source, interval: interval, window: 512, relays: relays,
		byID: map[string]*pendingEvent{}, e2e: newLatencies(), progress: make(chan struct{}),
		relayE2E: newLatencies(), early: map[string]time.Time{},
	}
}

// add registers an accepted event sent at start.
func (t *applyTracker) add(id string, n int, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.byID[id]; dup {
		return
	}
	p := &pendingEvent{id: id, n: n, start: start}
	t.byID[id] = p
	t.added++
	t.queue = append(t.queue, p)
	if at, ok := t.early[id]; ok {
		delete(t.early, id)
		t.markRelayed(p, at)
	}
}

// relayed notes that the outgoing event caused by webhook id was seen on
// events.> at at.
func (t *applyTracker) relayed(id string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byID[id]
	if p == nil {
		if len(t.early) < 1<<16 {
			t.early[id] = at
		}
		return
	}
	t.markRelayed(p, at)
}

func (t *applyTracker) markRelayed(p *pendingEvent, at time.Time) {
	if p.relayed {
		return
	}
	p.relayed = true
	t.relayedN++
	if at.After(t.lastRelayed) {
		t.lastRelayed = at
	}
	if p.done {
		delete(t.byID, p.id)
	}
	t.relayE2E.record(at.Sub(p.start))
	close(t.progress)
	t.progress = make(chan struct{})
}

// run polls until ctx ends.
func (t *applyTracker) run(ctx context.Context) {
	timer := time.NewTimer(t.interval)
	defer timer.Stop()
	ids := make([]string, 0, t.window)
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		var pending int
		ids, pending = t.oldestPending(ids[:0])
		if len(ids) > 0 {
			t.poll(ctx, ids)
		}
		// 64 pending per interval: at half the maximum rate and a few
		// milliseconds of latency that is the base interval.
		timer.Reset(min(max(t.interval, t.interval*time.Duration(pending/64)), 100*time.Millisecond))
	}
}

func (t *applyTracker) oldestPending(ids []string) ([]string, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	head := 0
	for head < len(t.queue) && t.queue[head].done {
		head++
	}
	if head > 0 {
		t.queue = append(t.queue[:0], t.queue[head:]...)
	}
	for _, p := range t.queue {
		if len(ids) == t.window {
			break
		}
		if !p.done {
			ids = append(ids, p.id)
		}
	}
	return ids, t.added - t.seen
}

func (t *applyTracker) poll(ctx context.Context, ids []string) {
	at := time.Now()
	found, err := store.InboxFindApplied(ctx, t.pool, t.consumer, t.source, ids)
	if err != nil {
		t.noteErr(ctx, err)
		return
	}
	if len(found) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range found {
		p := t.byID[id]
		if p == nil || p.done {
			continue
		}
		p.done = true
		t.seen++
		if !t.relays || p.relayed {
			delete(t.byID, id) // memory stays proportional to what is pending
		}
		t.e2e.record(at.Sub(p.start))
		if t.firstSeen.IsZero() {
			t.firstSeen = at
		}
		t.lastSeen = at
	}
	close(t.progress)
	t.progress = make(chan struct{})
}

func (t *applyTracker) noteErr(ctx context.Context, err error) {
	var pgErr *pgconn.PgError
	if ctx.Err() != nil || errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return // shutting down, or the instance has not migrated yet
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pollErrs++
	t.lastErr = err
}

// applied is how many tracked events have been seen in the inbox.
func (t *applyTracker) applied() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen
}

// wait blocks until want events were seen in the inbox (or, with relayed,
// on events.>), ctx ends or idle passes without progress; it reports
// whether all were seen.
func (t *applyTracker) wait(ctx context.Context, want int, relayed bool, idle time.Duration) bool {
	for {
		t.mu.Lock()
		seen, ch := t.seen, t.progress
		if relayed {
			seen = t.relayedN
		}
		t.mu.Unlock()
		if seen >= want {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		case <-time.After(idle):
			return false
		}
	}
}

type trackerFigures struct {
	e2e         Latency
	relayE2E    Latency
	relayed     int
	lastRelayed time.Time
	seen        int
	firstSeen   time.Time
	lastSeen    time.Time
	pollErrs    int
	lastErr     error
}

func (t *applyTracker) figures() trackerFigures {
	t.mu.Lock()
	defer t.mu.Unlock()
	return trackerFigures{e2e: t.e2e.summary(), relayE2E: t.relayE2E.summary(), relayed: t.relayedN, lastRelayed: t.lastRelayed, seen: t.seen, firstSeen: t.firstSeen, lastSeen: t.lastSeen, pollErrs: t.pollErrs, lastErr: t.lastErr}
}
