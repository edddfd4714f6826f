package delivery

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A takeover gate compares what JetStream counts unacked with what this
// reader holds at that moment or later, never earlier: a delivery acked
// while the gate asks JetStream lowers both, and the gate stays shut
// while another reader still holds a message.
func TestGateCountsHeldAfterAskingJetStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := hookbridgetest.NATS(t)
	if _, err := js.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "GATE", Subjects: []string{"gate.>"}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.JS.Publish(ctx, "gate.a", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.JS.CreateConsumer(ctx, "GATE", jetstream.ConsumerConfig{Durable: "gate", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 3 {
		t.Fatalf("fetched %d, want 3", len(msgs))
	}
	m := &Manager{log: slog.New(slog.NewTextHandler(io.Discard, nil)), hard: ctx}
	s := &Sender{e: Endpoint{Name: "e", Ordered: true}, m: m, log: m.log, roomCh: make(chan struct{}, 1), cons: cons,
		held: map[uint64]*item{}, keys: map[string]*keyState{}, gated: true, gateSince: time.Now()}
	// This reader holds the first two; the third is another reader's.
	first := &item{seq: 1, msg: msgs[0]}
	s.held[1], s.held[2] = first, &item{seq: 2, msg: msgs[1]}
	m.hooks.gateInfo = func() { s.ack(first) } // settled while the gate asks
	var work conc.WaitGroup
	s.look(ctx, &work)
	work.Wait()
	if !s.gated {
		t.Fatal("the gate opened while another reader held a message")
	}
	// Once the other reader's message is settled, the gate opens.
	m.hooks.gateInfo = nil
	if err := msgs[2].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	s.look(ctx, &work)
	work.Wait()
	if s.gated {
		t.Fatal("the gate stayed shut with nothing held elsewhere")
	}
}

// A sender that takes a rate-limited endpoint over starts with an empty
// bucket: the previous reader's last request may be a moment old, so its
// first request waits one interval of the rate rather than going at once.
func TestRateLimiterStartsEmptyOnTakeover(t *testing.T) {
	t.Parallel()
	m := &Manager{log: slog.New(slog.NewTextHandler(io.Discard, nil)), opts: Options{Client: func(Endpoint) *http.Client { return nil }}}
	s := newSender(m, Endpoint{Name: "e", Rate: 0.001, Concurrency: 1, Timeout: time.Second}, nil)
	if tokens := s.limiter.Tokens(); tokens >= 1 {
		t.Fatalf("a new sender's limiter holds %.3f tokens: its first request would go at once", tokens)
	}
}
