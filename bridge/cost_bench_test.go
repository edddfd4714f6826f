package bridge_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
)

// cpuTime is the CPU time (user + system) this process has used so far,
// the embedded JetStream server's included.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRequestCost is one Standard Webhooks request through ServeHTTP
// as `hookbridge serve` runs it by default: a text logger at the info
// level (writing to io.Discard, so only the cost of producing lines
// counts), an order body of about 200 bytes, publish to JetStream with
// file storage. It reports allocations and the process's CPU time per
// request (the in-process JetStream server's included), the figures the
// per-request log line and the body decoding show up in.
func BenchmarkRequestCost(b *testing.B) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	v, err := verify.NewStandardWebhooks([]string{secret}, 0)
	if err != nil {
		b.Fatal(err)
	}
	id, typ := bridge.DefaultFields(verify.SchemeStandardWebhooks)
	h, err := bridge.New(benchJetStream(b), bridge.Options{
		Sources: []bridge.Source{{Name: "demo", Verifier: v, EventID: id, EventType: typ}},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)), // info, the default level
	})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		id := "msg_" + strconv.Itoa(i)
		body := benchBody(id)
		sig, err := verify.SignStandard(secret, id, now, body)
		if err != nil {
			b.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/webhooks/demo", bytes.NewReader(body))
		req.SetPathValue("source", "demo")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(verify.StandardHeaderID, id)
		req.Header.Set(verify.StandardHeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(verify.StandardHeaderSignature, sig)
		reqs[i] = req
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, reqs[i])
		if rec.Code != http.StatusAccepted {
			b.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	}
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
}
