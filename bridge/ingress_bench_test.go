package bridge_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// benchJetStream starts an embedded JetStream with its store in a
// temporary directory and connects in-process, as `hookbridge serve` does
// by default, with the ingress streams created.
func benchJetStream(b *testing.B) jetstream.JetStream {
	b.Helper()
	return inProcessJetStream(b, 0)
}

// inProcessJetStream is benchJetStream's server with maxPayload as its
// largest message (0: the embedded default).
func inProcessJetStream(t testing.TB, maxPayload int64) jetstream.JetStream {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := embedded.Connect(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.EnsureIngress(context.Background(), js, stream.Options{}); err != nil {
		t.Fatal(err)
	}
	return js
}

func benchBody(id string) []byte {
	return fmt.Appendf(nil, `{"type":"order.created","timestamp":"2026-11-29T12:00:00Z","data":{"order_id":%q,"amount_cents":1000,"currency":"EUR"}}`, id)
}

// BenchmarkPublish is the publish the ingress makes for each accepted
// webhook, alone: an order body with hookbridge's headers and Nats-Msg-Id,
// synchronously until the PubAck (file storage, in-process connection).
// "parallel" keeps GOMAXPROCS×8 publishes in flight, as concurrent
// requests do.
func BenchmarkPublish(b *testing.B) {
	publish := func(b *testing.B, js jetstream.JetStream, id string) {
		body := benchBody(id)
		sum := sha256.Sum256(body)
		msg := bridge.HookMsg("demo", id, "order.created", "", hex.EncodeToString(sum[:]), time.Now(), body)
		if _, err := js.PublishMsg(context.Background(), msg,
			jetstream.WithMsgID(stream.MsgID("demo", id)), jetstream.WithExpectStream(stream.Hooks)); err != nil {
			b.Error(err)
		}
	}
	serialAndParallel(b, "msgs/s", func(b *testing.B) func(b *testing.B, id string) {
		js := benchJetStream(b)
		return func(b *testing.B, id string) { publish(b, js, id) }
	})
}

// serialAndParallel runs one unit of work (set up per sub-benchmark, given
// a fresh id each time) one at a time and from 8×GOMAXPROCS goroutines,
// reporting the rate in unit.
func serialAndParallel(b *testing.B, unit string, setup func(b *testing.B) func(b *testing.B, id string)) {
	b.Run("serial", func(b *testing.B) {
		do := setup(b)
		n := 0
		for b.Loop() {
			do(b, "s-"+strconv.Itoa(n))
			n++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	})
	b.Run("parallel", func(b *testing.B) {
		do := setup(b)
		var n atomic.Int64
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				do(b, "p-"+strconv.FormatInt(n.Add(1), 10))
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	})
}

// BenchmarkVerifyPublish is one whole ingress request without the
// network: the handler reads the body, verifies the Standard Webhooks
// signature, extracts id and type, publishes and answers 202. The
// difference to BenchmarkPublish is the ingress's own cost per webhook.
func BenchmarkVerifyPublish(b *testing.B) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newHandler := func(b *testing.B) http.Handler {
		v, err := verify.NewStandardWebhooks([]string{secret}, 0)
		if err != nil {
			b.Fatal(err)
		}
		id, typ := bridge.DefaultFields(verify.SchemeStandardWebhooks)
		h, err := bridge.New(benchJetStream(b), bridge.Options{
			Sources: []bridge.Source{{Name: "demo", Verifier: v, EventID: id, EventType: typ}},
			Logger:  slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			b.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(bridge.Pattern, h)
		return mux
	}
	request := func(b *testing.B, h http.Handler, id string) {
		body := benchBody(id)
		now := time.Now()
		sig, err := verify.SignStandard(secret, id, now, body)
		if err != nil {
			b.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/webhooks/demo", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(verify.StandardHeaderID, id)
		req.Header.Set(verify.StandardHeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(verify.StandardHeaderSignature, sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			b.Errorf("status %d: %s", rec.Code, rec.Body)
		}
	}
	serialAndParallel(b, "req/s", func(b *testing.B) func(b *testing.B, id string) {
		h := newHandler(b)
		return func(b *testing.B, id string) { request(b, h, id) }
	})
}
