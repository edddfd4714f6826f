package loadgen_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/cmd/hookbridge-bench/loadgen"
)

// TestRetrySendsTheSameBytes puts a proxy in front of a real ingress that
// forwards every request but answers the first attempt of each event 503
// after it was stored, a second later (a lost answer). The retry must
// carry the same body and signature headers, so the ingress answers it
// 200 duplicate; a retry re-signed with a fresh timestamp in the body was
// a different body under the same id: 409, counted as failed.
func TestRetrySendsTheSameBytes(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	env, inst := startInstance(t, c, loadgen.ConsumerSettings{}, "ingress")

	type attempt struct {
		body              []byte
		ts, sig, upstream string
	}
	var mu sync.Mutex
	attempts := map[string][]attempt{}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, inst.URL+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		id := r.Header.Get(verify.StandardHeaderID)
		mu.Lock()
		attempts[id] = append(attempts[id], attempt{body, r.Header.Get(verify.StandardHeaderTimestamp), r.Header.Get(verify.StandardHeaderSignature), resp.Status})
		first := len(attempts[id]) == 1
		mu.Unlock()
		if first {
			// Stored, but the answer is lost; the sender's clock moves on.
			time.Sleep(1100 * time.Millisecond)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(resp.StatusCode)
	}))
	t.Cleanup(proxy.Close)

	const total = 8
	res, err := loadgen.Load(c, loadgen.Options{URL: proxy.URL, Secret: env.Secret(), Concurrency: total, Total: total})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || res.Duplicates != total || res.Retries != total {
		t.Fatalf("failed %d, duplicates %d, retries %d (%v); want 0, %d, %d", res.Failed, res.Duplicates, res.Retries, res.Statuses, total, total)
	}
	for id, as := range attempts {
		if len(as) != 2 {
			t.Fatalf("%s: %d attempts, want 2", id, len(as))
		}
		if !bytes.Equal(as[0].body, as[1].body) || as[0].ts != as[1].ts || as[0].sig != as[1].sig {
			t.Fatalf("%s: the retry differs from the first attempt (timestamp %s/%s)", id, as[0].ts, as[1].ts)
		}
		if as[1].upstream != "200 OK" {
			t.Fatalf("%s: ingress answered the retry %s, want 200 duplicate", id, as[1].upstream)
		}
	}
}
