package engine

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// queueMsg is the part of a message the queue reads.
type queueMsg struct {
	jetstream.Msg
	data string
}

func (m queueMsg) Data() []byte    { return []byte(m.data) }
func (m queueMsg) Subject() string { return "hooks.demo.x" }

// TestQueueNudgeWakesAWaitingPop: the batching loop hears that a batch
// finished (nudge) while it waits for more messages; a nudge sent while
// nobody waits is kept for the next wait, and queued messages still come
// first.
func TestQueueNudgeWakesAWaitingPop(t *testing.T) {
	t.Parallel()
	q := newMsgQueue(10, 1<<20)
	go func() {
		time.Sleep(20 * time.Millisecond)
		q.nudge()
	}()
	start := time.Now()
	// The deadline is far off: waking before it is the nudge's doing.
	if _, st := q.pop(time.Now().Add(time.Minute)); st != popNudged {
		t.Fatalf("pop = %v, want popNudged", st)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Fatalf("pop waited %s for the nudge", waited)
	}

	q.nudge() // nobody waits: kept
	q.push(queueMsg{data: "a"})
	if m, st := q.pop(time.Time{}); st != popped || string(m.Data()) != "a" {
		t.Fatalf("pop = %v, %v; want the queued message first", m, st)
	}
	if _, st := q.pop(time.Time{}); st != popNudged {
		t.Fatalf("pop = %v, want the kept nudge", st)
	}
	if _, st := q.pop(time.Now().Add(10 * time.Millisecond)); st != popTimedOut {
		t.Fatalf("pop = %v, want popTimedOut: one nudge wakes one wait", st)
	}
}
