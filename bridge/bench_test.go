package bridge_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// benchBodyBytes is the approximate size of a benchmark delivery, near a
// typical provider payload.
const benchBodyBytes = 1024

// benchDeliveries signs n distinct deliveries of about benchBodyBytes each
// with the second of two active secrets (a rotation in progress, so every
// configured secret's MAC is computed).
func benchDeliveries(b *testing.B, sc scheme, n int) []*http.Request {
	b.Helper()
	now := time.Now()
	reqs := make([]*http.Request, n)
	for i := range n {
		h, body, _ := sc.sample(fmt.Sprintf("evt-%d", i))
		pad := `"pad":"` + strings.Repeat("x", max(0, benchBodyBytes-len(body)-9)) + `",`
		body = append([]byte("{"+pad), body[1:]...)
		sc.sign(b, sc.secrets[1], now, h, body)
		req := httptest.NewRequest(http.MethodPost, "/webhooks/"+sc.name, bytes.NewReader(body))
		req.Header = h
		req.SetPathValue("source", sc.name)
		reqs[i] = req
	}
	return reqs
}

func benchHandler(b *testing.B, sc scheme) (*hookbridgetest.JetStream, *bridge.Handler) {
	b.Helper()
	js := hookbridgetest.NATS(b) // HOOKS uses file storage
	js.EnsureHooks(b)
	h, err := bridge.New(js.JS, bridge.Options{Sources: []bridge.Source{sc.source(b)}, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return js, h
}

// serveOne serves req; Errorf, not Fatalf, so RunParallel may call it.
func serveOne(b *testing.B, h http.Handler, req *http.Request) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		b.Errorf("answer %d %s, want 202", rec.Code, rec.Body)
	}
}

// BenchmarkIngress measures one request at a time through ServeHTTP:
// read, verify, identify and publish to JetStream with file storage,
// waiting for the ack. The figure is the latency-bound rate of a single
// sender.
func BenchmarkIngress(b *testing.B) {
	for _, sc := range schemes {
		b.Run(sc.name, func(b *testing.B) {
			js, h := benchHandler(b, sc)
			reqs := benchDeliveries(b, sc, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				serveOne(b, h, reqs[i])
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			if n := js.StreamMsgs(b, stream.Hooks); n != uint64(b.N) {
				b.Fatalf("HOOKS holds %d messages, want %d", n, b.N)
			}
		})
	}
}

// BenchmarkIngressParallel is BenchmarkIngress with 16 concurrent
// requests per CPU, as many senders would make; JetStream batches their
// acks.
func BenchmarkIngressParallel(b *testing.B) {
	for _, sc := range schemes {
		b.Run(sc.name, func(b *testing.B) {
			js, h := benchHandler(b, sc)
			reqs := benchDeliveries(b, sc, b.N)
			var next atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					serveOne(b, h, reqs[next.Add(1)-1])
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			if n := js.StreamMsgs(b, stream.Hooks); n != uint64(b.N) {
				b.Fatalf("HOOKS holds %d messages, want %d", n, b.N)
			}
		})
	}
}
