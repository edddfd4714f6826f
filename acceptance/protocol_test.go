package acceptance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestAcceptanceProtocol walks the seed's protocol in order on one
// pipeline: first event, exact repeat, changed body inside the duplicate
// window, changed body after it. The deliveries inside the window are
// posted back to back and the applies awaited after them: waiting for
// the first apply before the repeat made the repeat land after a short
// window on a loaded machine (202 instead of 200).
func TestAcceptanceProtocol(t *testing.T) {
	t.Parallel()
	for _, bs := range batchSizes() {
		t.Run(fmt.Sprintf("batch=%d", bs), func(t *testing.T) {
			t.Parallel()
			window := 5 * time.Second
			p := startPipeline(t, pipelineOpts{batchSize: bs, window: window})
			body := orders.WebhookBody(orders.Created, "o-42", 1000)

			// 1. A new event: one inbox row, one order, one outbox row.
			code, r := p.post("evt-42", body)
			expect(t, code, r, http.StatusAccepted, "accepted")
			stored := time.Now() // JetStream stored it (and started its window) before answering
			if r.Seq != 1 || r.EventID != "evt-42" {
				t.Fatalf("answer = %+v, want seq 1 for evt-42", r)
			}

			// 2. The exact repeat: nothing changes, nothing new in the stream.
			code, r = p.post("evt-42", body)
			expect(t, code, r, http.StatusOK, "duplicate")

			// 3. Same id, different body, inside the window: 409 at the
			// ingress, one conflict row, the order untouched. The sender
			// retrying the same conflicting body adds no row.
			changed := orders.WebhookBody(orders.Created, "o-42", 9999)
			for range 2 {
				code, r = p.post("evt-42", changed)
				expect(t, code, r, http.StatusConflict, "conflict")
			}
			p.waitCounts(counts{inbox: 1, orders: 1, outbox: 1, conflicts: 1})
			if n := p.js.StreamMsgs(t, stream.Hooks); n != 1 {
				t.Fatalf("HOOKS holds %d messages after conflicts, want 1", n)
			}
			if n := p.db.Count(t, "SELECT count(*) FROM hookbridge.conflicts WHERE detected_by = 'ingress' AND event_id = 'evt-42' AND original_seq = 1"); n != 1 {
				t.Fatalf("ingress conflict rows = %d, want 1", n)
			}

			// 4. Same id, different body, after the window: JetStream takes
			// it as new, the consumer's inbox finds the other hash.
			// JetStream forgets the id when a timer fires after the window;
			// the second is for that timer.
			time.Sleep(time.Until(stored.Add(window + time.Second)))
			later := orders.WebhookBody(orders.Created, "o-42", 7777)
			code, r = p.post("evt-42", later)
			expect(t, code, r, http.StatusAccepted, "accepted")
			p.waitCounts(counts{inbox: 1, orders: 1, outbox: 1, conflicts: 2})
			if n := p.db.Count(t, "SELECT count(*) FROM hookbridge.conflicts WHERE detected_by = 'orders' AND event_id = 'evt-42'"); n != 1 {
				t.Fatalf("consumer conflict rows = %d, want 1", n)
			}
			if n := p.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-42' AND amount_cents = 1000 AND version = 1"); n != 1 {
				t.Fatal("the order was changed by a conflicting delivery")
			}
			if n := p.js.StreamMsgs(t, stream.Hooks); n != 2 {
				t.Fatalf("HOOKS holds %d messages, want 2", n)
			}
		})
	}
}

// failOnce wraps a handler so the first call for each event does all its
// writes and then fails, as a crash right before commit would.
func failOnce(calls *atomic.Int32) func(consumer.Handler) consumer.Handler {
	var mu sync.Mutex
	failed := map[string]bool{}
	return func(next consumer.Handler) consumer.Handler {
		return consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			calls.Add(1)
			if err := next.Handle(ctx, tx, ev); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if !failed[ev.ID] {
				failed[ev.ID] = true
				return errors.New("injected failure before commit")
			}
			return nil
		})
	}
}

// TestFailureBeforeCommitRollsBackAndRedeliveryAppliesOnce: the handler's
// writes and the inbox row vanish with the rollback; the redelivery finds
// the key free and applies exactly once.
func TestFailureBeforeCommitRollsBackAndRedeliveryAppliesOnce(t *testing.T) {
	t.Parallel()
	for _, bs := range batchSizes() {
		t.Run(fmt.Sprintf("batch=%d", bs), func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			p := startPipeline(t, pipelineOpts{batchSize: bs, wrap: failOnce(&calls)})
			code, r := p.post("evt-43", orders.WebhookBody(orders.Created, "o-43", 500))
			expect(t, code, r, http.StatusAccepted, "accepted")
			p.waitCounts(counts{inbox: 1, orders: 1, outbox: 1})
			if got := calls.Load(); got != 2 {
				t.Fatalf("handler ran %d times, want 2 (failed once, applied once)", got)
			}
			if n := p.db.Count(t, "SELECT count(*) FROM demo.orders WHERE version = 1"); n != 1 {
				t.Fatal("order applied more than once")
			}
		})
	}
}

// TestApplyRollsBackEverythingOnFailure checks the transaction directly:
// after a failing handler, neither the inbox row nor the effect exists.
func TestApplyRollsBackEverythingOnFailure(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	var calls atomic.Int32
	h := failOnce(&calls)(orders.Handler("orders"))
	ev := event("evt-1", orders.WebhookBody(orders.Created, "o-1", 100))
	out, err := engine.Apply(context.Background(), db.Pool, "orders", h, ev)
	if out != consumer.Failed || err == nil {
		t.Fatalf("first apply = %v, %v; want failed", out, err)
	}
	for _, table := range []string{"hookbridge.inbox", "demo.orders", "hookbridge.outbox"} {
		if n := db.Count(t, "SELECT count(*) FROM "+table); n != 0 {
			t.Fatalf("%s has %d rows after rollback", table, n)
		}
	}
	out, err = engine.Apply(context.Background(), db.Pool, "orders", h, ev)
	if out != consumer.Processed || err != nil {
		t.Fatalf("retry = %v, %v; want processed", out, err)
	}
	out, _ = engine.Apply(context.Background(), db.Pool, "orders", h, ev)
	if out != consumer.Duplicate {
		t.Fatalf("third apply = %v; want duplicate", out)
	}
	for _, table := range []string{"hookbridge.inbox", "demo.orders", "hookbridge.outbox"} {
		if n := db.Count(t, "SELECT count(*) FROM "+table); n != 1 {
			t.Fatalf("%s has %d rows, want 1", table, n)
		}
	}
}

func event(id string, body []byte) consumer.Event {
	return consumer.Event{Source: "demo", ID: id, Type: orders.Created, Body: body, BodySHA256: sha(body), StreamSeq: 1, NumDelivered: 1}
}

// TestConcurrentApplyOneProcessedOneDuplicate races two transactions for
// the same event; the handler lingers so both are inside at once.
func TestConcurrentApplyOneProcessedOneDuplicate(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	slow := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.2)"); err != nil {
			return err
		}
		return orders.Handler("orders").Handle(ctx, tx, ev)
	})
	ev := event("evt-44", orders.WebhookBody(orders.Created, "o-44", 100))
	var wg sync.WaitGroup
	outcomes := make([]consumer.Outcome, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i], errs[i] = engine.Apply(context.Background(), db.Pool, "orders", slow, ev)
		}()
	}
	wg.Wait()
	got := map[consumer.Outcome]int{}
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("apply %d: %v", i, errs[i])
		}
		got[outcomes[i]]++
	}
	if got[consumer.Processed] != 1 || got[consumer.Duplicate] != 1 {
		t.Fatalf("outcomes = %v, want one processed and one duplicate", got)
	}
	for _, table := range []string{"hookbridge.inbox", "demo.orders", "hookbridge.outbox"} {
		if n := db.Count(t, "SELECT count(*) FROM "+table); n != 1 {
			t.Fatalf("%s has %d rows, want 1", table, n)
		}
	}
}

// TestConcurrentDeliveriesAtIngress sends the same delivery ten times at
// once: JetStream stores it once and the order exists once.
func TestConcurrentDeliveriesAtIngress(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		p := startPipeline(t, pipelineOpts{batchSize: bs})
		body := orders.WebhookBody(orders.Created, "o-45", 100)
		var wg sync.WaitGroup
		var accepted, duplicate atomic.Int32
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, _ := p.post("evt-45", body)
				switch code {
				case http.StatusAccepted:
					accepted.Add(1)
				case http.StatusOK:
					duplicate.Add(1)
				}
			}()
		}
		wg.Wait()
		if accepted.Load() != 1 || duplicate.Load() != 9 {
			t.Fatalf("accepted %d, duplicate %d; want 1 and 9", accepted.Load(), duplicate.Load())
		}
		p.waitCounts(counts{inbox: 1, orders: 1, outbox: 1})
		if n := p.js.StreamMsgs(t, stream.Hooks); n != 1 {
			t.Fatalf("HOOKS holds %d messages, want 1", n)
		}
	})
}

// TestRejectedDeliveriesPublishNothing covers every refusal: each gets its
// status and a JSON error, and the stream stays empty.
func TestRejectedDeliveriesPublishNothing(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOpts{batchSize: 1})
	body := orders.WebhookBody(orders.Created, "o-46", 100)
	signed := func(mutate func(r *http.Request)) *http.Request {
		req, err := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-46", Time: time.Now(), Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(req)
		}
		return req
	}
	otherSecret := "whsec_" + "c2VjcmV0LW9mLXNvbWVvbmUtZWxzZQ=="
	cases := []struct {
		name string
		req  func() *http.Request
		code int
	}{
		{"wrong secret", func() *http.Request {
			req, _ := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: otherSecret, ID: "evt-46", Time: time.Now(), Body: body})
			return req
		}, http.StatusUnauthorized},
		{"missing signature", func() *http.Request {
			return signed(func(r *http.Request) { r.Header.Del(verify.StandardHeaderSignature) })
		}, http.StatusUnauthorized},
		{"tampered body", func() *http.Request {
			req := signed(nil)
			tampered := bytes.Replace(body, []byte("100"), []byte("999"), 1)
			req.Body = ioNopCloser(tampered)
			req.ContentLength = int64(len(tampered))
			return req
		}, http.StatusUnauthorized},
		{"stale timestamp", func() *http.Request {
			req, _ := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-46", Time: time.Now().Add(-10 * time.Minute), Body: body})
			return req
		}, http.StatusUnauthorized},
		{"future timestamp", func() *http.Request {
			req, _ := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-46", Time: time.Now().Add(10 * time.Minute), Body: body})
			return req
		}, http.StatusUnauthorized},
		{"invalid json", func() *http.Request {
			req, _ := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-46", Time: time.Now(), Body: []byte(`{"type":`)})
			return req
		}, http.StatusBadRequest},
		{"missing type", func() *http.Request {
			req, _ := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-46", Time: time.Now(), Body: []byte(`{"data":{}}`)})
			return req
		}, http.StatusBadRequest},
		{"too large", func() *http.Request {
			big := []byte(`{"type":"order.created","pad":"` + strings.Repeat("x", 2<<20) + `"}`)
			req, _ := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-46", Time: time.Now(), Body: big})
			return req
		}, http.StatusRequestEntityTooLarge},
		{"unknown source", func() *http.Request {
			req, _ := hookbridgetest.NewSignedRequest(context.Background(), strings.Replace(p.url, "/demo", "/nope", 1), hookbridgetest.Delivery{Secret: secret, ID: "evt-46", Time: time.Now(), Body: body})
			return req
		}, http.StatusNotFound},
		{"wrong method", func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, p.url, nil)
			return req
		}, http.StatusMethodNotAllowed},
	}
	for _, c := range cases {
		code, r := do(t, c.req())
		if code != c.code || r.Status != "error" || r.Error == "" {
			t.Errorf("%s: answer %d %+v, want %d with a JSON error", c.name, code, r, c.code)
		}
	}
	if n := p.js.StreamMsgs(t, stream.Hooks); n != 0 {
		t.Fatalf("HOOKS holds %d messages after refusals, want 0", n)
	}
	p.waitCounts(counts{})
}

// TestWildcardTypeIsEscapedNotApplied: a free-text type that spells a
// subject wildcard is stored (providers send free text, and a 400 would be
// a lost delivery) on an escaped subject that no consumer filter for
// another type matches, so the orders consumer never applies it.
func TestWildcardTypeIsEscapedNotApplied(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOpts{batchSize: 1})
	req, err := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-46w", Time: time.Now(), Body: []byte(`{"type":"order.>"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if code, r := do(t, req); code != http.StatusAccepted {
		t.Fatalf("wildcard type: answer %d %+v, want 202", code, r)
	}
	s, err := p.js.JS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(context.Background(), stream.HookSubject("demo", "order.>"))
	if err != nil {
		t.Fatalf("stored message on the escaped subject: %v", err)
	}
	if strings.ContainsAny(msg.Subject, "*>") {
		t.Fatalf("stored on subject %q, which holds a wildcard", msg.Subject)
	}
	if n := p.js.StreamMsgs(t, stream.Hooks); n != 1 {
		t.Fatalf("HOOKS holds %d messages, want 1", n)
	}
	// Counted once the consumer is settled: it would (wrongly) have
	// picked the message up by then.
	p.waitCounts(counts{})
}

// TestBrokerDownAnswers503 stops JetStream: the sender gets 503 with
// Retry-After and retries later; once the broker is back it is accepted.
func TestBrokerDownAnswers503(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOpts{batchSize: 1})
	p.js.Server.Shutdown()
	p.js.Server.WaitForShutdown()
	req, err := hookbridgetest.NewSignedRequest(context.Background(), p.url, hookbridgetest.Delivery{Secret: secret, ID: "evt-47", Time: time.Now(), Body: orders.WebhookBody(orders.Created, "o-47", 1)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("answer %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if c := p.counts(); c != (counts{}) {
		t.Fatalf("rows written while the broker was down: %+v", c)
	}
}

// TestDuplicateOfVanishedOriginalIsRetried: when the original left the
// stream inside the duplicate window, a repeat (same or different body)
// cannot be judged, so the sender is asked to retry rather than told
// "duplicate" — a different body must never be dropped unrecorded.
func TestDuplicateOfVanishedOriginalIsRetried(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOpts{batchSize: 1})
	code, r := p.post("evt-48", orders.WebhookBody(orders.Created, "o-48", 100))
	expect(t, code, r, http.StatusAccepted, "accepted")
	s, err := p.js.JS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(context.Background(), r.Seq); err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{orders.WebhookBody(orders.Created, "o-48", 100), orders.WebhookBody(orders.Created, "o-48", 999)} {
		code, r = p.post("evt-48", body)
		if code != http.StatusServiceUnavailable || r.Status != "error" {
			t.Fatalf("repeat of a vanished original: %d %+v, want 503", code, r)
		}
	}
	if n := p.js.StreamMsgs(t, stream.Hooks); n != 0 {
		t.Fatalf("HOOKS holds %d messages, want 0", n)
	}
}
