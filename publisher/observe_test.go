package publisher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

type recordingObserver struct {
	mu   sync.Mutex
	rows []publisher.PublishedRow
}

func (o *recordingObserver) ObservePublish(_ time.Time, _ time.Duration, rows []publisher.PublishedRow) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rows = append(o.rows, rows...)
}

// TestContextHeadersReachTheStreamAndTheObserver: headers put in the
// context with WithHeaders are stored with the row (the message's own win,
// invalid names are dropped), published with the event, and reported to
// the relay's observer.
func TestContextHeadersReachTheStreamAndTheObserver(t *testing.T) {
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
	obs := &recordingObserver{}
	opts := fastOpts()
	opts.Observer = obs
	r := publisher.NewRelay(db.Pool, js.JS, opts)
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
		obs.rows[0].Header["traceparent"] == "" {
		t.Fatalf("observed %+v, want one sent row ctx-1 with its traceparent", obs.rows)
	}
}
