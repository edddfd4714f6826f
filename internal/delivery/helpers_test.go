package delivery_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

func quiet() *slog.Logger {
	if os.Getenv("DELIVERY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Two active secrets, a rotation in progress.
var (
	oldSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("old-secret-of-24-bytes-!"))
	newSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("new-secret-of-24-bytes-!"))
)

// sender side: the outbox database, a relay publishing it to EVENTS.
type origin struct {
	js *hookbridgetest.JetStream
	db *hookbridgetest.Database
}

func newOrigin(t *testing.T) *origin {
	t.Helper()
	o := &origin{js: hookbridgetest.NATS(t), db: hookbridgetest.Postgres(t)}
	if _, err := stream.Ensure(context.Background(), o.js.JS, stream.EventsConfig(stream.Options{})); err != nil {
		t.Fatal(err)
	}
	r := relay.NewRelay(o.db.Pool, o.js.JS, relay.Options{PollInterval: 100 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: quiet()})
	run(t, r.Run)
	// The relay ensures EVENTS in its first round; its stream update must
	// not race the tests' consumer creations (nats-server's file store
	// reads the stream's config unlocked there: a report of the race
	// detector, not of this package). A warm-up message no endpoint
	// receives shows that round is over.
	err := pgx.BeginFunc(context.Background(), o.db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(context.Background(), tx, publisher.Message{ID: "warm-up", Subject: "events.warmup", Payload: []byte(`{}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the relay's first round", func() bool { return o.js.StreamMsgs(t, stream.Events) == 1 })
	return o
}

// event is the body the tests send: the receiver reads the key and n.
type event struct {
	Type string `json:"type"`
	Key  string `json:"key"`
	N    int    `json:"n"`
}

// enqueue commits one outbox message per event, in order, in one transaction.
func (o *origin) enqueue(t *testing.T, evs ...event) []string {
	t.Helper()
	ids := make([]string, len(evs))
	msgs := make([]publisher.Message, len(evs))
	for i, ev := range evs {
		body, _ := json.Marshal(ev)
		ids[i] = "evt-" + ev.Key + "-" + itoa(ev.N)
		// Keyed in the outbox too, so the relay publishes each key's
		// events in commit order.
		msgs[i] = publisher.Message{ID: ids[i], Subject: "events.orders." + ev.Key, Payload: body, OrderingKey: ev.Key}
	}
	err := pgx.BeginFunc(context.Background(), o.db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(context.Background(), tx, msgs...)
	})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return ids
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func (o *origin) attempts(t *testing.T, endpoint string) int {
	t.Helper()
	return o.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_attempts WHERE endpoint = $1", endpoint)
}

// endpoint is an endpoint of the tests: on loopback, fast schedule.
func endpoint(name, url string) delivery.Endpoint {
	return delivery.Endpoint{Name: name, URL: url, Subjects: []string{"events.orders.>"},
		Secrets: []string{oldSecret, newSecret}, Timeout: 2 * time.Second, AllowPrivate: true,
		Retry: []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}}
}

// start runs a delivery instance with endpoint e until the test ends;
// stop ends it earlier (gracefully) and waits for Run to return.
func (o *origin) start(t *testing.T, e delivery.Endpoint, hook func(string, int) bool) (stop func()) {
	t.Helper()
	return o.instance(t, "", func(opts *delivery.Options) {
		if hook != nil {
			delivery.SetAfterSend(opts, hook)
		}
	}, e).stop
}

// instance is one delivery instance: a manager with a NATS connection and
// a database pool of its own, as a process has.
type instance struct {
	name string
	m    *delivery.Manager
	nc   *nats.Conn
	pool *pgxpool.Pool
	stop func() // graceful
	kill func() // abrupt: NATS cut, attempts in flight cut, nothing handed back
}

// instance starts an instance tagged name (its requests carry it in
// X-Test-Instance) with endpoints es; configure adjusts its options.
func (o *origin) instance(t *testing.T, name string, configure func(*delivery.Options), es ...delivery.Endpoint) *instance {
	t.Helper()
	nc, err := nats.Connect(o.js.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), o.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The instance's log is shown when the test fails.
	logs := &hookbridgetest.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance %q logged:\n%s", name, logs.String())
		}
	})
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := delivery.Options{Endpoints: es, JS: js, Pool: pool, Sign: verify.SignStandard, Logger: logger, Instance: name,
		Client: func(e delivery.Endpoint) *http.Client {
			c := delivery.NewClient(e)
			c.Transport = tagged{name: name, next: c.Transport}
			return c
		}}
	delivery.Fast(&opts)
	if configure != nil {
		configure(&opts)
	}
	m, err := delivery.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{name: name, m: m, nc: nc, pool: pool}
	stop := run(t, m.Run)
	// A new endpoint starts with the events published after its durable
	// exists.
	for _, e := range es {
		eventually(t, "the durable of "+e.Name, func() bool {
			_, err := o.js.JS.Consumer(context.Background(), "EVENTS", delivery.ConsumerName(e.Name))
			return err == nil
		})
	}
	var once sync.Once
	in.stop = func() { once.Do(func() { stop(); pool.Close() }) }
	in.kill = func() {
		once.Do(func() {
			nc.Close()
			delivery.Kill(m)
			stop()
			pool.Close()
		})
	}
	t.Cleanup(in.stop)
	return in
}

// tagged names the instance on every request.
type tagged struct {
	name string
	next http.RoundTripper
}

func (t tagged) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Instance", t.name)
	return t.next.RoundTrip(r)
}

// run runs fn until the test ends or stop is called.
func run(t *testing.T, fn func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(time.Minute):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// seen is one request the receiver got and what it answered.
type seen struct {
	id       string
	ev       event
	code     int
	status   string // the ingress's answer: accepted, duplicate, ...
	at       time.Time
	instance string // X-Test-Instance
	attempt  string // the traceparent, when sent
	// reached says the request reached the ingress (it was not refused
	// by the test's fail function): one its client gave up may have been
	// stored with its answer lost.
	reached bool
}

// receiver is a second hookbridge: an ingress verifying Standard Webhooks
// with the new secret only, on its own JetStream, whose HOOKS stream
// holds what it stored. fail, when set, answers a request with a status
// of its own instead of passing it on (0: pass); a 429 says Retry-After: 1.
type receiver struct {
	js  *hookbridgetest.JetStream
	url string

	mu   sync.Mutex
	log  []seen
	fail func(n int, ev event) int // n: requests so far with this id
	// hold, when set, keeps each request this long (or until its client
	// hangs up) before answering.
	hold time.Duration
	// inflight counts requests being answered, maxInflight the most at
	// once; sameID counts requests that came while another request with
	// the same webhook-id was being answered.
	inflight, maxInflight, sameID int
	open                          map[string]int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{js: hookbridgetest.NATS(t)}
	rc.js.EnsureHooks(t)
	v, err := verify.New(verify.SchemeStandardWebhooks, []string{newSecret}, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, typ := bridge.DefaultFields(verify.SchemeStandardWebhooks)
	h, err := bridge.New(rc.js.JS, bridge.Options{Logger: quiet(),
		Sources: []bridge.Source{{Name: "partner", Verifier: v, EventID: id, EventType: typ}}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(bridge.Pattern, rc.wrap(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	rc.url = srv.URL + "/webhooks/partner"
	return rc
}

func (rc *receiver) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev event
		_ = json.Unmarshal(body, &ev)
		s := seen{id: r.Header.Get(delivery.HeaderID), ev: ev, at: time.Now(), instance: r.Header.Get("X-Test-Instance"),
			attempt: r.Header.Get("traceparent")}
		rc.mu.Lock()
		n := 0
		for _, l := range rc.log {
			if l.id == s.id {
				n++
			}
		}
		fail, hold := rc.fail, rc.hold
		if rc.open == nil {
			rc.open = map[string]int{}
		}
		if rc.open[s.id] > 0 {
			rc.sameID++
		}
		rc.open[s.id]++
		rc.inflight++
		rc.maxInflight = max(rc.maxInflight, rc.inflight)
		rc.mu.Unlock()
		defer func() {
			rc.mu.Lock()
			rc.inflight--
			rc.open[s.id]--
			rc.mu.Unlock()
		}()
		if hold > 0 {
			select {
			case <-time.After(hold):
			case <-r.Context().Done():
			}
		}
		if code := 0; fail != nil {
			if code = fail(n, ev); code != 0 {
				s.code = code
				if code == http.StatusTooManyRequests {
					w.Header().Set("Retry-After", "1")
				}
				w.WriteHeader(code)
				_, _ = io.WriteString(w, "receiver says no")
				rc.record(s)
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var resp bridge.Response
		_ = json.Unmarshal(rec.Body.Bytes(), &resp)
		s.code, s.status, s.reached = rec.Code, resp.Status, true
		rc.record(s)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

func (rc *receiver) record(s seen) {
	rc.mu.Lock()
	rc.log = append(rc.log, s)
	rc.mu.Unlock()
}

func (rc *receiver) seen() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]seen(nil), rc.log...)
}

// concurrency is the most requests the receiver answered at once, and
// how many came while one with the same webhook-id was being answered.
func (rc *receiver) concurrency() (most, sameID int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.maxInflight, rc.sameID
}

func (rc *receiver) setFail(f func(n int, ev event) int) {
	rc.mu.Lock()
	rc.fail = f
	rc.mu.Unlock()
}

// stored is how many deliveries the receiver's ingress stored and
// answered (its log holds their answers: a test reading the log after
// waiting on stored sees them). An event stored by a request whose client
// gave up (an instance killed) counts once a later request has the
// answer duplicate.
func (rc *receiver) stored(t *testing.T) uint64 {
	n := rc.js.StreamMsgs(t, stream.Hooks)
	ids := map[string]bool{}
	for _, s := range rc.seen() {
		if s.status == "accepted" || s.status == "duplicate" {
			ids[s.id] = true
		}
	}
	return min(n, uint64(len(ids)))
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	hookbridgetest.Eventually(t, time.Minute, what, cond)
}
