package engine

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// gateMsg is the part of a delivered message the scheduler reads.
type gateMsg struct {
	jetstream.Msg
	seq uint64
	h   nats.Header
}

func (m *gateMsg) Headers() nats.Header { return m.h }
func (m *gateMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq, Consumer: m.seq}, NumDelivered: 1}, nil
}
func (m *gateMsg) Ack() error        { return nil }
func (m *gateMsg) Nak() error        { return nil }
func (m *gateMsg) Term() error       { return nil }
func (m *gateMsg) InProgress() error { return nil }

// A takeover gate replaced by the next one before it was done (a delivery
// gap, a fence) leaves no key waiting for a message another member held
// and has since acked: the next gate's open, on counts that agree, ends
// every such wait. Before, the key waited for a message that never came
// back, and its later messages were kept in progress for good.
func TestASecondGateEndsTheFirstGatesWaits(t *testing.T) {
	t.Parallel()
	for _, second := range []string{"open", "openForeign"} {
		t.Run(second, func(t *testing.T) {
			t.Parallel()
			s := newKeyedScheduler("gates", 1, 1, 10, time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
			var mu sync.Mutex
			var applied []uint64
			s.process = func(_ context.Context, msgs []jetstream.Msg) []action {
				out := make([]action, len(msgs))
				mu.Lock()
				defer mu.Unlock()
				for i, m := range msgs {
					md, _ := m.Metadata()
					applied = append(applied, md.Sequence.Stream)
					out[i] = action{kind: ack}
				}
				return out
			}
			stop, done := make(chan struct{}), make(chan struct{})
			go func() { s.run(stop, context.Background()); close(done) }()
			t.Cleanup(func() { s.drain(0); close(stop); <-done })

			kh := stream.OrderingKeyHeader("o-1")
			key := orderKey("demo", kh)
			s.add(0)
			g1 := s.gens.Add(1)
			s.gate(0, g1, true)
			s.barrier(0)
			s.openForeign(0, g1, []foreignMsg{{seq: 5, key: key}}) // seq 5 is held by another member
			g2 := s.gens.Add(1)                                    // a gap: the next gate replaces the first
			s.gate(0, g2, false)
			s.barrier(0)
			if second == "open" {
				s.open(0, g2) // the counts agree: nothing is held elsewhere
			} else {
				s.openForeign(0, g2, nil) // the scan finds seq 5 acked meanwhile
			}
			h := nats.Header{}
			h.Set(stream.HeaderSource, "demo")
			h.Set(stream.HeaderOrderingKey, kh)
			s.arrive(0, &gateMsg{seq: 6, h: h})
			deadline := time.Now().Add(time.Minute)
			for {
				mu.Lock()
				n := len(applied)
				mu.Unlock()
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("seq 6 of the key not applied after a minute (foreign messages waited for: %d)", s.counters[0].foreign.Load())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if f := s.counters[0].foreign.Load(); f != 0 {
				t.Errorf("foreign messages waited for = %d, want 0", f)
			}
		})
	}
}
