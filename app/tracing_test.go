package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/tracing"
)

// batchCalls is a BatchHandler that records how it was called.
type batchCalls struct {
	mu      sync.Mutex
	batches []int // events per HandleBatch call
	handles int
}

func (b *batchCalls) Handle(context.Context, pgx.Tx, consumer.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handles++
	return nil
}

func (b *batchCalls) HandleBatch(_ context.Context, _ pgx.Tx, evs []consumer.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches = append(b.batches, len(evs))
	return nil
}

// TestTracingKeepsTheSetWisePath: with the OpenTelemetry tracer on, a
// BatchHandler is still applied set-wise (HandleBatch, one apply span per
// batch with its event count), not event by event. (Tracing is a
// consumer.Tracer and leaves the handler as it is, so the handler's own
// HandleBatch is what applies.)
func TestTracingKeepsTheSetWisePath(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("test")

	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	const n = 6
	for i := range n {
		ns.PublishHook(t, "demo", fmt.Sprintf("e%d", i), "thing.done", []byte(`{}`))
	}
	inner := &batchCalls{}
	c, err := engine.New(db.Pool, ns.JS, engine.Options{Name: "traced", EventTypes: []string{"thing.done"},
		Handler: inner, Tracer: &otelTracer{tracer: tracer}, Concurrency: 1, BatchWait: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer run: %v", err)
		}
	})
	hookbridgetest.Eventually(t, time.Minute, "every event applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == n
	})

	inner.mu.Lock()
	batches, handles := append([]int(nil), inner.batches...), inner.handles
	inner.mu.Unlock()
	total := 0
	for _, b := range batches {
		total += b
	}
	if handles != 0 || total != n || len(batches) == 0 || batches[0] < 2 {
		t.Fatalf("HandleBatch calls %v and %d Handle calls; want the %d events through HandleBatch", batches, handles, n)
	}
	// An apply span ends just after its commit, so it may still be open
	// when the inbox rows are already visible.
	var spans []int
	applySpans := func() bool {
		spans = spans[:0]
		sum := 0
		for _, s := range rec.Ended() {
			if s.Name() != tracing.SpanApply {
				continue
			}
			for _, kv := range s.Attributes() {
				if kv.Key == "messaging.batch.message_count" {
					spans = append(spans, int(kv.Value.AsInt64()))
					sum += int(kv.Value.AsInt64())
				}
			}
		}
		return sum >= n
	}
	hookbridgetest.Eventually(t, time.Minute, "the apply spans ended", applySpans)
	if fmt.Sprint(spans) != fmt.Sprint(batches) {
		t.Fatalf("apply spans with event counts %v, want one per HandleBatch call %v", spans, batches)
	}
}
