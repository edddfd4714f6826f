// Package acceptance runs the seed's acceptance protocol against the whole
// pipeline: a real HTTP ingress, an embedded JetStream server, real
// Postgres and the demo orders consumer. Every check counts rows and
// stream messages afterwards instead of trusting HTTP answers.
package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type pipeline struct {
	t   *testing.T
	js  *hookbridgetest.JetStream
	db  *hookbridgetest.Database
	url string
}

type pipelineOpts struct {
	batchSize int
	window    time.Duration
	wrap      func(consumer.Handler) consumer.Handler
	backoff   []time.Duration
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startPipeline runs ingress + orders consumer + conflict recorder.
func startPipeline(t *testing.T, o pipelineOpts) *pipeline {
	t.Helper()
	js := hookbridgetest.NATS(t)
	db := hookbridgetest.Postgres(t, orders.Migrations())
	ctx, cancel := context.WithCancel(context.Background())
	sopts := stream.Options{DuplicateWindow: o.window}
	if err := stream.EnsureIngress(ctx, js.JS, sopts); err != nil {
		t.Fatal(err)
	}
	v, err := verify.NewStandardWebhooks([]string{secret}, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, typ := bridge.DefaultFields(verify.SchemeStandardWebhooks)
	h, err := bridge.New(js.JS, bridge.Options{
		Sources: []bridge.Source{{Name: "demo", Verifier: v, EventID: id, EventType: typ}},
		Logger:  quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(bridge.Pattern, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	var handler consumer.Handler = orders.Handler("orders")
	if o.wrap != nil {
		handler = o.wrap(handler)
	}
	backoff := o.backoff
	if backoff == nil {
		backoff = []time.Duration{50 * time.Millisecond}
	}
	c, err := engine.New(db.Pool, js.JS, engine.Options{
		Name:       "orders",
		Sources:    []string{"demo"},
		EventTypes: []string{orders.Created, orders.Paid, orders.Cancelled},
		Handler:    handler,
		BatchSize:  o.batchSize,
		Backoff:    backoff,
		Logger:     quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := engine.NewConflictRecorder(db.Pool, js.JS, quietLogger())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = c.Run(ctx) }()
	go func() { defer wg.Done(); _ = rec.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &pipeline{t: t, js: js, db: db, url: srv.URL + "/webhooks/demo"}
}

// post sends a correctly signed delivery and returns status and answer.
func (p *pipeline) post(id string, body []byte) (int, bridge.Response) {
	p.t.Helper()
	req, err := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: id, Time: time.Now(), Body: body})
	if err != nil {
		p.t.Fatal(err)
	}
	return do(p.t, req)
}

func do(t *testing.T, req *http.Request) (int, bridge.Response) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r bridge.Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("decode answer (status %d): %v", resp.StatusCode, err)
	}
	return resp.StatusCode, r
}

type counts struct{ inbox, orders, outbox, conflicts int }

func (p *pipeline) counts() counts {
	p.t.Helper()
	return counts{
		inbox:     p.db.Count(p.t, "SELECT count(*) FROM hookbridge.inbox"),
		orders:    p.db.Count(p.t, "SELECT count(*) FROM demo.orders"),
		outbox:    p.db.Count(p.t, "SELECT count(*) FROM hookbridge.outbox"),
		conflicts: p.db.Count(p.t, "SELECT count(*) FROM hookbridge.conflicts"),
	}
}

// waitCounts waits until the counts equal want, then checks they stay.
func (p *pipeline) waitCounts(want counts) {
	p.t.Helper()
	var got counts
	hookbridgetest.Eventually(p.t, time.Minute, fmt.Sprintf("counts %+v", want), func() bool {
		got = p.counts()
		return got == want
	})
	// Once the durable has every message acked or terminated, a wrongly
	// redelivered or twice-applied message has shown up.
	hookbridgetest.Eventually(p.t, time.Minute, "the orders durable settled", func() bool {
		c, err := p.js.JS.Consumer(context.Background(), stream.Hooks, "orders")
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	if got = p.counts(); got != want {
		p.t.Fatalf("counts changed after settling: got %+v, want %+v", got, want)
	}
}

func expect(t *testing.T, gotCode int, got bridge.Response, wantCode int, wantStatus string) {
	t.Helper()
	if gotCode != wantCode || got.Status != wantStatus {
		t.Fatalf("answer = %d %q (%s), want %d %q", gotCode, got.Status, got.Error, wantCode, wantStatus)
	}
}

// batchSizes are the consumer batch sizes the protocol runs at: 1 (a
// transaction per event) and the default (the set-wise path).
func batchSizes() []int { return []int{1, engine.DefaultBatchSize} }

// forBatchSizes runs f as a parallel subtest at each of batchSizes.
func forBatchSizes(t *testing.T, f func(t *testing.T, bs int)) {
	t.Helper()
	for _, bs := range batchSizes() {
		t.Run(fmt.Sprintf("batch=%d", bs), func(t *testing.T) {
			t.Parallel()
			f(t, bs)
		})
	}
}
