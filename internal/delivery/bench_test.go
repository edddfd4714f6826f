package delivery_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// BenchmarkThroughput measures deliveries per second to a local receiver
// that answers 204 at once, signed, each attempt recorded in Postgres,
// against the floor: a bare Go HTTP client loop posting the same bodies
// with the same concurrency in the same run. It reports both and their
// ratio.
//
//	go test -run '^$' -bench Throughput -benchtime 1x ./internal/delivery/
func BenchmarkThroughput(b *testing.B) {
	const n, conc = 2000, 16
	var got atomic.Int64
	var first atomic.Int64 // unix nanos of the first request of a run
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	body := bytes.Repeat([]byte(`{"type":"order.created","data":{"order_id":"o-123456"}}`), 8) // ~450 bytes

	js := hookbridgetest.NATS(b)
	db := hookbridgetest.Postgres(b)
	if _, err := stream.Ensure(context.Background(), js.JS, stream.EventsConfig(stream.Options{})); err != nil {
		b.Fatal(err)
	}
	var senderRate, floorRate float64
	for i := 0; i < b.N; i++ {
		// The floor.
		got.Store(0)
		start := time.Now()
		var wg sync.WaitGroup
		var next atomic.Int64
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
		for range conc {
			wg.Go(func() {
				for next.Add(1) <= n {
					resp, err := client.Post(srv.URL, "application/json", bytes.NewReader(body))
					if err == nil {
						resp.Body.Close()
					}
				}
			})
		}
		wg.Wait()
		floorRate = n / time.Since(start).Seconds()

		// The sender, from EVENTS.
		name := "bench" + strconv.Itoa(i)
		e := delivery.Endpoint{Name: name, URL: srv.URL, Subjects: []string{"events.bench." + name}, Secrets: []string{oldSecret, newSecret},
			Concurrency: conc, AllowPrivate: true}
		// The endpoint's durable exists before the events are published
		// (a new endpoint starts with the events published after it); the
		// sender takes it over as it finds it.
		if _, err := js.JS.CreateConsumer(context.Background(), "EVENTS", jetstream.ConsumerConfig{Durable: delivery.ConsumerName(name),
			FilterSubjects: e.Subjects, DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			b.Fatal(err)
		}
		for j := range n {
			m := &nats.Msg{Subject: "events.bench." + name, Data: body, Header: nats.Header{}}
			m.Header.Set(nats.MsgIdHdr, name+"-"+strconv.Itoa(j))
			if _, err := js.JS.PublishMsg(context.Background(), m); err != nil {
				b.Fatal(err)
			}
		}
		m, err := delivery.NewManager(delivery.Options{Endpoints: []delivery.Endpoint{e}, JS: js.JS, Pool: db.Pool, Sign: verify.SignStandard, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		got.Store(0)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start = time.Now()
		go func() { _ = m.Run(ctx); close(done) }()
		hookbridgetest.Eventually(b, 5*time.Minute, "all delivered", func() bool { return got.Load() >= n })
		// From the first delivery: the instance's start (its lease, the
		// durable's update, the endpoint's state) is not throughput.
		senderRate = (n - 1) / time.Since(time.Unix(0, first.Load())).Seconds()
		b.ReportMetric(float64(time.Unix(0, first.Load()).Sub(start).Milliseconds()), "start_ms")
		cancel()
		<-done
	}
	b.ReportMetric(senderRate, "deliveries/s")
	b.ReportMetric(floorRate, "floor_posts/s")
	b.ReportMetric(senderRate/floorRate, "ratio")
}
