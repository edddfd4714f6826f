package engine

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// msgQueue is the runner's buffer between the pull iterator (one feeder
// goroutine pushes) and the batching loop (one goroutine pops). It is
// bounded by count and bytes; a single message is always let in, so a
// body larger than the byte bound still gets through.
type msgQueue struct {
	maxMsgs, maxBytes int

	mu     sync.Mutex
	items  []queued // FIFO; items[head:] are waiting
	head   int
	bytes  int
	closed bool

	// ready and room wake the one popper and the one pusher. Each has a
	// buffer of one, so a signal sent while nobody waits is not lost.
	ready chan struct{}
	room  chan struct{}
	// nudged wakes a waiting pop without a message (see nudge).
	nudged chan struct{}
}

type queued struct {
	msg  jetstream.Msg
	size int
	at   time.Time
}

type popState int

const (
	popped popState = iota
	popTimedOut
	popClosed
	// popNudged: nudge was called while pop waited (or before it).
	popNudged
)

func newMsgQueue(maxMsgs, maxBytes int) *msgQueue {
	return &msgQueue{maxMsgs: max(1, maxMsgs), maxBytes: maxBytes,
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1), nudged: make(chan struct{}, 1)}
}

// nudge makes the popper's current or next wait return popNudged: the
// batching loop uses it to hear that a batch finished.
func (q *msgQueue) nudge() { signal(q.nudged) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push appends m, waiting while the queue is full.
func (q *msgQueue) push(m jetstream.Msg) {
	size := len(m.Data()) + len(m.Subject())
	for {
		q.mu.Lock()
		if n := len(q.items) - q.head; n == 0 || (n < q.maxMsgs && q.bytes < q.maxBytes) {
			q.items = append(q.items, queued{msg: m, size: size, at: time.Now()})
			q.bytes += size
			q.mu.Unlock()
			signal(q.ready)
			return
		}
		q.mu.Unlock()
		<-q.room
	}
}

// close tells the popper that nothing more will be pushed; what is queued
// is still returned.
func (q *msgQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.ready)
}

// pop returns the oldest message. It waits until one is queued, the queue
// is closed and empty (popClosed), or deadline passes (popTimedOut); a
// zero deadline waits without limit.
func (q *msgQueue) pop(deadline time.Time) (jetstream.Msg, popState) {
	var timeout <-chan time.Time
	for {
		q.mu.Lock()
		if q.head < len(q.items) {
			it := q.items[q.head]
			q.items[q.head] = queued{}
			q.head++
			q.bytes -= it.size
			if q.head == len(q.items) {
				// Empty: reuse the array from the start.
				q.items, q.head = q.items[:0], 0
			} else if q.head > 1024 && q.head > len(q.items)/2 {
				// Mostly consumed: move the rest down so the array does
				// not grow without end under a steady backlog.
				n := copy(q.items, q.items[q.head:])
				clear(q.items[n:])
				q.items, q.head = q.items[:n], 0
			}
			q.mu.Unlock()
			signal(q.room)
			return it.msg, popped
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, popClosed
		}
		if timeout == nil && !deadline.IsZero() {
			wait := time.Until(deadline)
			if wait <= 0 {
				return nil, popTimedOut
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-q.ready:
		case <-q.nudged:
			return nil, popNudged
		case <-timeout:
			return nil, popTimedOut
		}
	}
}

// waitRoom waits until the queue has room for at least minMsgs messages
// and minBytes bytes (or is empty), or ctx ends, and returns the room it
// has.
func (q *msgQueue) waitRoom(ctx context.Context, minMsgs, minBytes int) (msgs, bytes int) {
	for {
		q.mu.Lock()
		n := len(q.items) - q.head
		msgs, bytes = q.maxMsgs-n, q.maxBytes-q.bytes
		q.mu.Unlock()
		if n == 0 || (msgs >= minMsgs && bytes >= minBytes) {
			return max(msgs, 1), max(bytes, minBytes)
		}
		select {
		case <-q.room:
		case <-ctx.Done():
			return msgs, bytes
		}
	}
}

// waitingSince returns the queued messages that were pushed before t.
func (q *msgQueue) waitingSince(t time.Time) []jetstream.Msg {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []jetstream.Msg
	for _, it := range q.items[q.head:] {
		if !it.at.Before(t) {
			break // pushed in order: the rest are newer
		}
		out = append(out, it.msg)
	}
	return out
}
