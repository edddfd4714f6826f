package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// TestEventsTrimKeepsWhatAnEndpointNeeds: with delivery endpoints, the
// guard trims EVENTS by age only below every endpoint durable's ack
// floor and below the lowest sequence a pending delivery in Postgres
// reads; nothing while an endpoint's durable does not exist yet.
func TestEventsTrimKeepsWhatAnEndpointNeeds(t *testing.T) {
	t.Parallel()
	j := hookbridgetest.NATS(t)
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	o := stream.Options{Delivery: true}
	if cfg := stream.EventsConfig(o); cfg.MaxAge != 0 || cfg.MaxBytes != stream.FallbackEventsMaxBytes {
		t.Fatalf("EVENTS with endpoints: max age %v, max bytes %d; want none and %d", cfg.MaxAge, cfg.MaxBytes, stream.FallbackEventsMaxBytes)
	}
	if err := stream.EnsureIngress(ctx, j.JS, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stream.EnsureEvents(ctx, j.JS, stream.Options{Delivery: true, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		if _, err := j.JS.Publish(ctx, "events.orders.created", fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	g := &storeGuard{js: j.JS, log: quietLogger(), maxAge: time.Millisecond,
		events: &eventsGuard{durables: []string{"delivery_a", "delivery_b"},
			pending: func(ctx context.Context) (uint64, bool, error) { return delivery.EventsFloor(ctx, db.Pool) }}}
	first := func() uint64 { return streamInfo(t, j.JS, stream.Events).State.FirstSeq }
	// Every message is older than the 1 ms horizon once a millisecond has
	// passed: wait for that state before each look.
	hookbridgetest.Eventually(t, time.Minute, "the events to pass max_age", func() bool {
		return time.Since(streamInfo(t, j.JS, stream.Events).State.LastTime) > 10*time.Millisecond
	})

	ackStreamUpTo(t, j, stream.Events, "delivery_a", 80)
	if err := g.check(ctx); err != nil || first() != 1 {
		t.Fatalf("delivery_b has no durable yet: err %v, first seq %d; want nothing purged", err, first())
	}
	ackStreamUpTo(t, j, stream.Events, "delivery_b", 60)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO hookbridge.delivery_pending (endpoint, stream_seq, event_id, subject, next_attempt_at, origin)
		VALUES ('a', 40, 'e-40', 'events.orders.created', 'infinity', 'parked')`); err != nil {
		t.Fatal(err)
	}
	if err := g.check(ctx); err != nil || first() != 40 {
		t.Fatalf("ack floors 80 and 60, a pending delivery of seq 40: err %v, first seq %d; want 40", err, first())
	}
	// b is disabled: its durable paused, its floor stays where it is.
	if _, err := j.JS.PauseConsumer(ctx, stream.Events, "delivery_b", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM hookbridge.delivery_pending`); err != nil {
		t.Fatal(err)
	}
	if err := g.check(ctx); err != nil || first() != 61 {
		t.Fatalf("pending delivery done, delivery_b (paused) acked 60: err %v, first seq %d; want 61", err, first())
	}
	if err := g.check(ctx); err != nil || first() != 61 {
		t.Fatalf("a second look: err %v, first seq %d; want still 61", err, first())
	}
	if got := streamInfo(t, j.JS, stream.Events).State.Msgs; got != n-60 {
		t.Fatalf("EVENTS holds %d events, want the %d delivery_b has not received", got, n-60)
	}
}

// TestDisabledEndpointLosesNoEventWhenEventsFills: serve --role relay
// --role delivery with EVENTS bounded to 16 KiB and its endpoint
// disabled while four times that is enqueued. EVENTS fills and refuses,
// the relay waits (no row dead), readiness says events_room, the guard
// trims nothing the endpoint has not received; once enabled, every event
// arrives and none is dead-lettered.
func TestDisabledEndpointLosesNoEventWhenEventsFills(t *testing.T) {
	t.Parallel()
	eventsFillWhileEndpointWaits(t, false)
}

// TestDownReceiverLosesNoEventWhenEventsFills: the same with the
// endpoint enabled and its receiver answering 503: the failed deliveries
// wait in Postgres (whose floor the guard keeps), the later ones in
// EVENTS, and once the receiver answers again every event arrives, none
// dead-lettered.
func TestDownReceiverLosesNoEventWhenEventsFills(t *testing.T) {
	t.Parallel()
	eventsFillWhileEndpointWaits(t, true)
}

// eventsFillWhileEndpointWaits enqueues four times what a 16 KiB EVENTS
// holds while the endpoint cannot receive (disabled, or its receiver
// down), checks that nothing is lost or trimmed while EVENTS is full, then
// lets the endpoint receive and checks that every event arrives.
func eventsFillWhileEndpointWaits(t *testing.T, receiverDown bool) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var mu sync.Mutex
	down := receiverDown
	got := map[string]int{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		if down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		got[r.Header.Get("Webhook-Id")]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	received := func() (distinct, total int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range got {
			total += n
		}
		return len(got), total
	}
	// Far more retry time (5 minutes) than the outage lasts: none of the
	// failed deliveries may run out of attempts.
	retry := []time.Duration{0}
	for range 300 {
		retry = append(retry, time.Second)
	}

	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.DatabaseURL = db.URL
		c.Streams.MaxBytes = 16 << 10
		c.Delivery.Endpoints = []EndpointConfig{{Name: "partner", URL: recv.URL, Subjects: stringList{"events.orders.>"},
			Secrets: stringList{secret}, AllowPrivate: true, Retry: retry}}
	})
	srv, err := NewServer(cfg, ordersHandlers(), []string{RoleRelay, RoleDelivery}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv.guardInterval = 50 * time.Millisecond
	rs := startPrepared(t, srv)
	hookbridgetest.Eventually(t, time.Minute, "the endpoint's consumer", func() bool {
		_, err := srv.js.Consumer(ctx, stream.Events, "delivery_partner")
		return err == nil
	})
	if info := streamInfo(t, srv.js, stream.Events); info.Config.MaxAge != 0 || info.Config.MaxBytes != 16<<10 {
		t.Fatalf("EVENTS max age %v, max bytes %d; want none and 16 KiB", info.Config.MaxAge, info.Config.MaxBytes)
	}
	if !receiverDown {
		if _, err := delivery.Disable(ctx, db.Pool, srv.js, "partner", "test"); err != nil {
			t.Fatal(err)
		}
	}

	const n = 120 // some 64 KiB: four times what EVENTS holds
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		for i := range n {
			m := publisher.Message{ID: fmt.Sprintf("ev-%03d", i), Subject: "events.orders.created",
				Payload: []byte(fmt.Sprintf(`{"order_id":"%03d","pad":"%s"}`, i, strings.Repeat("x", 400)))}
			if err := publisher.Enqueue(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// EVENTS is full and refuses: the rows wait in the outbox, and the
	// guard has seen it (readiness names events_room).
	db.AwaitCount(t, 1, "SELECT least(count(*), 1) FROM hookbridge.outbox WHERE status = 'pending' AND last_error LIKE '%maximum bytes%'")
	hookbridgetest.Eventually(t, time.Minute, "readiness to report EVENTS full", func() bool {
		resp, err := http.Get("http://" + rs.addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), `"events_room":"unavailable`)
	})
	info := streamInfo(t, srv.js, stream.Events)
	if info.State.FirstSeq != 1 || info.State.Msgs == 0 || info.State.Msgs >= n {
		t.Fatalf("EVENTS full with the endpoint disabled: first seq %d, %d events; want nothing trimmed and part of the %d",
			info.State.FirstSeq, info.State.Msgs, n)
	}
	st, err := relay.OutboxStats(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 || st.Pending != int64(n)-int64(info.State.Msgs) {
		t.Fatalf("outbox with EVENTS full = %+v, want 0 dead and %d pending", st, int64(n)-int64(info.State.Msgs))
	}
	if d, _ := received(); d != 0 {
		t.Fatalf("an endpoint that cannot receive received %d events", d)
	}
	if receiverDown {
		// The first events failed and wait in Postgres.
		hookbridgetest.Eventually(t, time.Minute, "failed deliveries in Postgres", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.delivery_pending") > 0
		})
		mu.Lock()
		down = false
		mu.Unlock()
	} else if _, err := delivery.Enable(ctx, db.Pool, srv.js, "partner"); err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "every event at the endpoint", func() bool {
		d, _ := received()
		return d == n
	})
	// The last rows are marked sent in the round that published them.
	db.AwaitCount(t, 0, "SELECT count(*) FROM hookbridge.outbox WHERE status = 'pending'")
	st, err = relay.OutboxStats(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	dead := db.Count(t, "SELECT count(*) FROM hookbridge.delivery_dead_letters")
	distinct, total := received()
	if st.Dead != 0 || st.Pending != 0 || dead != 0 || distinct != n {
		t.Fatalf("after enable: outbox %+v, %d dead letters, %d distinct events received (%d posts); want 0, 0, 0, %d",
			st, dead, distinct, total, n)
	}
	t.Logf("%d events through a 16 KiB EVENTS, %d posts answered 204", n, total)
}
