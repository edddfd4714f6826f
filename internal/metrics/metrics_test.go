package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRegistriesAreIndependent: two registries never share state, and
// nothing lands in the client library's default registry.
func TestRegistriesAreIndependent(t *testing.T) {
	t.Parallel()
	a, b := New(), New()
	a.IngressRequest("demo", 202, "")
	a.IngressRequest("demo", 401, "mismatch")
	a.ConsumerEvents("orders", "processed", 1)
	if got := testutil.ToFloat64(a.ingressRequests.WithLabelValues("demo", "202")); got != 1 {
		t.Fatalf("a: %g", got)
	}
	if got := testutil.ToFloat64(a.verifyFailures.WithLabelValues("demo", "mismatch")); got != 1 {
		t.Fatalf("a verify: %g", got)
	}
	if n := testutil.CollectAndCount(b.ingressRequests); n != 0 {
		t.Fatalf("b has %d ingress series", n)
	}
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), Namespace+"_") {
			t.Fatalf("%s registered globally", f.GetName())
		}
	}
}

func TestHandlerServesTheExpositionFormat(t *testing.T) {
	t.Parallel()
	r := New()
	r.InitConsumer("orders", []string{"processed", "duplicate", "conflict", "failed", "dead_lettered"})
	r.ConsumerBatch("orders", 3, 20*time.Millisecond)
	r.RelayBatch(2, 1, time.Millisecond)
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`hookbridge_consumer_events_total{consumer="orders",outcome="dead_lettered"} 0`,
		`hookbridge_consumer_batch_size_sum{consumer="orders"} 3`,
		`hookbridge_relay_rows_total{result="failed"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %q in\n%s", want, body)
		}
	}
}

func TestScrapeTimeCollectors(t *testing.T) {
	t.Parallel()
	r := New()
	slow := func(ctx context.Context, name string) (ConsumerState, error) {
		if name == "stuck" {
			<-ctx.Done() // the scrape timeout ends the lookup
			return ConsumerState{}, ctx.Err()
		}
		return ConsumerState{Pending: 7, AckPending: 2, Redelivered: 1, OldestUnacked: 90 * time.Second}, nil
	}
	if err := r.Register(NewConsumerCollector([]string{"orders", "stuck"}, slow, 50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(NewDatabaseCollector(func(context.Context) (DatabaseState, error) {
		return DatabaseState{}, errors.New("database down")
	}, 0)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	expected := `
# HELP hookbridge_consumer_info_up 1 if the consumer's JetStream info could be read at this scrape, else 0.
# TYPE hookbridge_consumer_info_up gauge
hookbridge_consumer_info_up{consumer="orders"} 1
hookbridge_consumer_info_up{consumer="stuck"} 0
# HELP hookbridge_consumer_oldest_unacked_age_seconds Age of the oldest HOOKS message the consumer has not acked yet (0 when none); HOOKS keeps it, and every later one, until the consumer has applied it.
# TYPE hookbridge_consumer_oldest_unacked_age_seconds gauge
hookbridge_consumer_oldest_unacked_age_seconds{consumer="orders"} 90
# HELP hookbridge_consumer_pending_messages Messages in HOOKS that match the consumer and were not delivered yet (JetStream num_pending).
# TYPE hookbridge_consumer_pending_messages gauge
hookbridge_consumer_pending_messages{consumer="orders"} 7
# HELP hookbridge_database_stats_up 1 if the outbox and dead-letter statistics could be read from Postgres at this scrape, else 0.
# TYPE hookbridge_database_stats_up gauge
hookbridge_database_stats_up 0
`
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(expected),
		"hookbridge_consumer_info_up", "hookbridge_consumer_pending_messages", "hookbridge_consumer_oldest_unacked_age_seconds", "hookbridge_database_stats_up"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("scrape took %s despite the timeout", d)
	}
}

// TestBatchSizeBucketsReachTheLargestBatch: batches of up to 1024 events
// (the set-wise default is 256) land in a finite bucket, not in +Inf.
func TestBatchSizeBucketsReachTheLargestBatch(t *testing.T) {
	t.Parallel()
	r := New()
	for _, n := range []int{1, 100, 256, 1024} {
		r.ConsumerBatch("orders", n, time.Millisecond)
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`hookbridge_consumer_batch_size_bucket{consumer="orders",le="64"} 1`,
		`hookbridge_consumer_batch_size_bucket{consumer="orders",le="128"} 2`,
		`hookbridge_consumer_batch_size_bucket{consumer="orders",le="256"} 3`,
		`hookbridge_consumer_batch_size_bucket{consumer="orders",le="512"} 3`,
		`hookbridge_consumer_batch_size_bucket{consumer="orders",le="1024"} 4`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %q in\n%s", want, body)
		}
	}
}
