package acceptance

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestMetricsCountWhatHappened runs the real serve wiring (ingress,
// orders consumer, relay), sends 5 new events, 1 exact repeat, 1 delivery
// with a wrong signature and 1 for an unknown source, then scrapes
// /metrics and checks every counter equals what happened, and that the
// scrape-time gauges (JetStream consumer info, outbox SQL) show the
// pipeline drained.
func TestMetricsCountWhatHappened(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	db := hookbridgetest.Postgres(t, orders.Migrations())
	a := serveApp(t, js, db, nil)
	base := "http://" + a.addr
	ctx := context.Background()

	send := func(url, key, id string, body []byte) int {
		t.Helper()
		req, err := hookbridgetest.NewSignedRequest(ctx, url, hookbridgetest.Delivery{Secret: key, ID: id, Time: time.Now(), Body: body})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 1; i <= 5; i++ {
		if code := send(base+"/webhooks/demo", secret, fmt.Sprintf("evt-%d", i), orders.WebhookBody(orders.Created, fmt.Sprintf("o-%d", i), 100)); code != http.StatusAccepted {
			t.Fatalf("event %d: status %d, want 202", i, code)
		}
	}
	if code := send(base+"/webhooks/demo", secret, "evt-1", orders.WebhookBody(orders.Created, "o-1", 100)); code != http.StatusOK {
		t.Fatalf("repeat: status %d, want 200", code)
	}
	wrong := "whsec_" + base64.StdEncoding.EncodeToString([]byte("not the configured secret"))
	if code := send(base+"/webhooks/demo", wrong, "evt-6", orders.WebhookBody(orders.Created, "o-6", 100)); code != http.StatusUnauthorized {
		t.Fatalf("wrong signature: status %d, want 401", code)
	}
	if code := send(base+"/webhooks/no-such-source", secret, "evt-7", orders.WebhookBody(orders.Created, "o-7", 100)); code != http.StatusNotFound {
		t.Fatalf("unknown source: status %d, want 404", code)
	}

	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"hookbridge_ingress_requests_total", []string{"source", "demo", "status", "202"}, 5},
		{"hookbridge_ingress_requests_total", []string{"source", "demo", "status", "200"}, 1},
		{"hookbridge_ingress_requests_total", []string{"source", "demo", "status", "401"}, 1},
		{"hookbridge_ingress_requests_total", []string{"source", "_unknown", "status", "404"}, 1},
		{"hookbridge_ingress_verification_failures_total", []string{"source", "demo", "reason", "mismatch"}, 1},
		{"hookbridge_ingress_publish_seconds", []string{"result", "stored"}, 5},
		{"hookbridge_ingress_publish_seconds", []string{"result", "duplicate"}, 1},
		{"hookbridge_ingress_publish_seconds", []string{"result", "error"}, -1},
		{"hookbridge_consumer_events_total", []string{"consumer", "orders", "outcome", "processed"}, 5},
		{"hookbridge_consumer_events_total", []string{"consumer", "orders", "outcome", "duplicate"}, 0},
		{"hookbridge_consumer_events_total", []string{"consumer", "orders", "outcome", "conflict"}, 0},
		{"hookbridge_consumer_events_total", []string{"consumer", "orders", "outcome", "failed"}, 0},
		{"hookbridge_consumer_events_total", []string{"consumer", "orders", "outcome", "dead_lettered"}, 0},
		{"hookbridge_consumer_info_up", []string{"consumer", "orders"}, 1},
		{"hookbridge_consumer_pending_messages", []string{"consumer", "orders"}, 0},
		{"hookbridge_consumer_ack_pending_messages", []string{"consumer", "orders"}, 0},
		{"hookbridge_consumer_redelivered_messages", []string{"consumer", "orders"}, 0},
		{"hookbridge_database_stats_up", nil, 1},
		{"hookbridge_outbox_pending_rows", nil, 0},
		{"hookbridge_outbox_oldest_pending_age_seconds", nil, 0},
		{"hookbridge_outbox_dead_rows", nil, 0},
		{"hookbridge_outbox_sent_rows", nil, 5},
		{"hookbridge_dead_letters_unresolved", []string{"consumer", "orders"}, 0},
		{"hookbridge_relay_rows_total", []string{"result", "sent"}, 5},
		{"hookbridge_relay_rows_total", []string{"result", "failed"}, 0},
	}

	// Wait until the pipeline has drained (5 applied, 5 relayed, nothing
	// pending anywhere), then until every figure below is scraped as it
	// will be: counters follow the commits they count, on a loaded
	// machine later.
	var m scrape
	settled := func() bool {
		for _, w := range want {
			if m.value(w.name, w.labels...) != w.value {
				return false
			}
		}
		return m.sum("hookbridge_consumer_batch_size", "consumer", "orders") == 5
	}
	hookbridgetest.Eventually(t, time.Minute, "the pipeline to drain", func() bool {
		m = scrapeMetrics(t, base+app.MetricsPath)
		return m.value("hookbridge_relay_rows_total", "result", "sent") == 5 &&
			m.value("hookbridge_outbox_pending_rows") == 0 &&
			m.value("hookbridge_consumer_ack_pending_messages", "consumer", "orders") == 0
	})
	// A figure that never comes is reported below, with the others.
	for deadline := time.Now().Add(time.Minute); !settled() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		m = scrapeMetrics(t, base+app.MetricsPath)
	}
	for _, w := range want {
		if got := m.value(w.name, w.labels...); got != w.value {
			t.Errorf("%s%v = %g, want %g", w.name, w.labels, got, w.value)
		}
	}
	// Histograms: every applied event is in exactly one batch; every
	// relayed row in one relay publish.
	if got := m.sum("hookbridge_consumer_batch_size", "consumer", "orders"); got != 5 {
		t.Errorf("batch sizes sum to %g, want 5", got)
	}
	if n := m.value("hookbridge_consumer_apply_seconds", "consumer", "orders"); n < 1 || n > 5 {
		t.Errorf("apply transactions = %g, want 1..5", n)
	}
	if n := m.value("hookbridge_relay_publish_seconds"); n < 1 || n > 5 {
		t.Errorf("relay publishes = %g, want 1..5", n)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("scrape:\n%s", m.dump())
	}
	// What the database holds agrees with the counters.
	if n := db.Count(t, "SELECT count(*) FROM demo.orders"); n != 5 {
		t.Fatalf("orders = %d, want 5", n)
	}

	// Readiness names the consumer check.
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"consumers":"ok"`) {
		t.Fatalf("readyz = %d %s, want 200 with consumers ok", resp.StatusCode, b)
	}
}
