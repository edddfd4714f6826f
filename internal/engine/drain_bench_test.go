package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// outcomeCount is a Tracer that counts acked outcomes.
type outcomeCount struct {
	applied atomic.Int64
	batches atomic.Int64
}

func (o *outcomeCount) TraceApplyStart(ctx context.Context, _ engine.TraceApplyStartData) context.Context {
	return ctx
}

func (o *outcomeCount) TraceApplyEnd(_ context.Context, d engine.TraceApplyEndData) {
	o.batches.Add(1)
	for _, out := range d.Outcomes {
		if out != consumer.Failed {
			o.applied.Add(1)
		}
	}
}

func (o *outcomeCount) TraceDeadLetterStart(ctx context.Context, _ engine.TraceDeadLetterStartData) context.Context {
	return ctx
}
func (o *outcomeCount) TraceDeadLetterEnd(context.Context, engine.TraceDeadLetterEndData) {}

// envInts reads a comma-separated list of integers from the environment,
// or returns def.
func envInts(b *testing.B, key string, def []int) []int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("%s: %v", key, err)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkConsumerDrain runs a whole consumer (JetStream pull, apply,
// ack) over a backlog of b.N account openings, at each batch size and
// concurrency, with the set-wise test handler; one op is one event. The
// pool has pgxpool's default size, as serve's. Use -benchtime=20000x.
// HOOKBRIDGE_BENCH_BATCH, _CONCURRENCY, _PREFETCH (batches per worker)
// and _MAX_ACK_PENDING (0: the default) narrow or widen the grid.
func BenchmarkConsumerDrain(b *testing.B) {
	for _, bs := range envInts(b, "HOOKBRIDGE_BENCH_BATCH", []int{1, 64, 256, 1024}) {
		for _, conc := range envInts(b, "HOOKBRIDGE_BENCH_CONCURRENCY", []int{1, 2, 4}) {
			for _, pf := range envInts(b, "HOOKBRIDGE_BENCH_PREFETCH", []int{2}) {
				for _, ap := range envInts(b, "HOOKBRIDGE_BENCH_MAX_ACK_PENDING", []int{0}) {
					name := fmt.Sprintf("batch=%d/concurrency=%d/prefetch=%dx", bs, conc, pf)
					if ap > 0 {
						name += fmt.Sprintf("/max_ack_pending=%d", ap)
					}
					b.Run(name, func(b *testing.B) {
						benchDrain(b, engine.Options{BatchSize: bs, Concurrency: conc, Prefetch: pf * bs * conc, MaxAckPending: ap})
					})
				}
			}
		}
	}
}

func benchDrain(b *testing.B, opts engine.Options) {
	db := hookbridgetest.Postgres(b, accountsMigrations())
	ns := hookbridgetest.NATS(b)
	ns.EnsureHooks(b)
	// Publish the backlog asynchronously: the drain, not the publish, is
	// measured.
	pending := make([]jetstream.PubAckFuture, 0, 4096)
	for i := range b.N {
		ev := accountEvent(fmt.Sprintf("e-%d", i), accountOpened, accountBody{Account: fmt.Sprintf("a-%d", i), Amount: 100}, 0)
		msg := nats.NewMsg(stream.HookSubject(ev.Source, ev.Type))
		msg.Data = ev.Body
		msg.Header.Set(stream.HeaderSource, ev.Source)
		msg.Header.Set(stream.HeaderEventID, ev.ID)
		msg.Header.Set(stream.HeaderEventType, ev.Type)
		f, err := ns.JS.PublishMsgAsync(msg, jetstream.WithMsgID(stream.MsgID(ev.Source, ev.ID)))
		if err != nil {
			b.Fatal(err)
		}
		if pending = append(pending, f); len(pending) == cap(pending) {
			waitAcks(b, pending)
			pending = pending[:0]
		}
	}
	waitAcks(b, pending)

	obs := &outcomeCount{}
	opts.Name, opts.EventTypes, opts.Handler, opts.Tracer = "accounts", accountTypes, accountsBatchHandler(), obs
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := engine.New(db.Pool, ns.JS, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	go func() { done <- c.Run(ctx) }()
	for obs.applied.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/float64(obs.batches.Load()), "events/batch")
	if got := db.Count(b, "SELECT count(*) FROM hookbridge.inbox"); got != b.N {
		b.Fatalf("inbox rows = %d, want %d", got, b.N)
	}
}

func waitAcks(b *testing.B, fs []jetstream.PubAckFuture) {
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		case <-time.After(30 * time.Second):
			b.Fatal("publish: no ack in 30s")
		}
	}
}
