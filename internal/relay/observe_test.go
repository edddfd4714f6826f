package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/publisher"
)

// recordedRow is one row a recordingTracer saw published.
type recordedRow struct {
	EventID string
	Header  nats.Header
	Seq     uint64
	Err     error
}

// recordingTracer records every row's start and end, and each batch's
// counts.
type recordingTracer struct {
	mu      sync.Mutex
	rows    []recordedRow
	batches []relay.TraceRelayEndData
}

type rowKey struct{}

func (o *recordingTracer) TraceRelayStart(ctx context.Context, _ relay.TraceRelayStartData) context.Context {
	return ctx
}

func (o *recordingTracer) TraceRelayEnd(_ context.Context, d relay.TraceRelayEndData) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches = append(o.batches, d)
}

func (o *recordingTracer) TraceRelayPublishStart(ctx context.Context, d relay.TraceRelayPublishStartData) context.Context {
	return context.WithValue(ctx, rowKey{}, d)
}

func (o *recordingTracer) TraceRelayPublishEnd(ctx context.Context, d relay.TraceRelayPublishEndData) {
	st, _ := ctx.Value(rowKey{}).(relay.TraceRelayPublishStartData)
	o.mu.Lock()
	defer o.mu.Unlock()
	if st.EventID != d.EventID {
		d.Err = fmt.Errorf("end for %q got the context of %q", d.EventID, st.EventID)
	}
	o.rows = append(o.rows, recordedRow{EventID: d.EventID, Header: st.Header, Seq: d.Seq, Err: d.Err})
}

// TestContextHeadersReachTheStreamAndTheTracer: headers put in the
// context with WithHeaders are stored with the row (the message's own win,
// invalid names are dropped), published with the event, and reported to
// the relay's tracer, each row's end with its own start's context.
func TestContextHeadersReachTheStreamAndTheTracer(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	db := hookbridgetest.Postgres(t)
	ctx := publisher.WithHeaders(context.Background(), map[string]string{
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"X-Team":      "from-context",
		"Nats-Msg-Id": "refused",
	})
	own := map[string]string{"X-Team": "from-message"}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(ctx, tx, publisher.Message{ID: "ctx-1", Subject: "events.test.created", Payload: []byte("p"), Header: own})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 1 {
		t.Fatalf("Enqueue changed the message's header map: %v", own)
	}
	obs := &recordingTracer{}
	opts := fastOpts()
	opts.Tracer = obs
	r := relay.NewRelay(db.Pool, js.JS, opts)
	if n, err := r.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1, nil", n, err)
	}
	msgs := eventsMsgs(t, js.JS)
	if len(msgs) != 1 {
		t.Fatalf("EVENTS holds %d messages, want 1", len(msgs))
	}
	h := msgs[0].header
	if got := h.Get("traceparent"); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Fatalf("published traceparent = %q", got)
	}
	if got := h.Get("X-Team"); got != "from-message" {
		t.Fatalf("X-Team = %q, want the message's own value", got)
	}
	if got := h.Get("Nats-Msg-Id"); got != "ctx-1" {
		t.Fatalf("Nats-Msg-Id = %q, want the row's id", got)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.rows) != 1 || obs.rows[0].EventID != "ctx-1" || obs.rows[0].Err != nil ||
		obs.rows[0].Header.Get("traceparent") == "" || obs.rows[0].Seq != 1 {
		t.Fatalf("observed %+v, want one sent row ctx-1 at EVENTS seq 1 with its traceparent", obs.rows)
	}
	if len(obs.batches) != 1 || obs.batches[0].Sent != 1 || obs.batches[0].Failed != 0 {
		t.Fatalf("observed batches %+v, want one with 1 sent", obs.batches)
	}
}
