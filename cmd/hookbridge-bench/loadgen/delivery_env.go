package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/pgtemp"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/publisher"
	"github.com/hookbridge/hookbridge/schema"
)

// deliveryEndpoint is one endpoint of a delivery run's configuration.
type deliveryEndpoint struct {
	name      string
	url       string
	subject   string // the EVENTS subject it reads, events.…
	ordered   bool
	keyHeader string
}

// deliveryEnv is one delivery scenario's processes: a nats-server, a fresh
// database, and `hookbridge serve` instances with the relay and delivery
// roles, configured with the scenario's endpoints.
type deliveryEnv struct {
	o         *DeliveryOptions
	dir       string
	nats      *process
	natsURL   string
	db        *pgtemp.Database
	pool      *pgxpool.Pool
	config    string
	instances []*clusterInstance
	// committed, when set, hears of every batch pace enqueued, as soon
	// as its transaction committed.
	committed func([]publisher.Message)
}

// deliverySecret is a random Standard Webhooks secret: every delivery is
// signed, as the throughput target asks.
func deliverySecret() string {
	key := make([]byte, 24)
	_, _ = rand.Read(key)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// deliveryYAML is the configuration of endpoints: no source, no consumer;
// the bench fills the outbox itself.
func deliveryYAML(endpoints []deliveryEndpoint, o *DeliveryOptions) []byte {
	var b strings.Builder
	secret := deliverySecret()
	b.WriteString("delivery:\n  endpoints:\n")
	for _, e := range endpoints {
		fmt.Fprintf(&b, "    - name: %s\n      url: %s\n      subjects: [%s]\n      secrets: [%q]\n      timeout: %s\n      concurrency: %d\n      allow_private: true\n",
			e.name, e.url, e.subject, secret, o.Timeout, o.Concurrency)
		if e.ordered {
			fmt.Fprintf(&b, "      ordered: true\n      key_header: %s\n", e.keyHeader)
		}
		if len(o.Retry) > 0 {
			steps := make([]string, len(o.Retry))
			for i, d := range o.Retry {
				steps[i] = d.String()
			}
			fmt.Fprintf(&b, "      retry: [%s]\n", strings.Join(steps, ", "))
		}
	}
	return []byte(b.String())
}

// newDeliveryEnv starts nats-server, creates the database and writes the
// configuration; no instance runs yet.
func newDeliveryEnv(ctx context.Context, o *DeliveryOptions, endpoints []deliveryEndpoint) (*deliveryEnv, error) {
	e := &deliveryEnv{o: o}
	var err error
	if e.dir, err = os.MkdirTemp("", "hookbridge-bench-delivery-"); err != nil {
		return e, err
	}
	if e.nats, e.natsURL, err = startNATSProcess(ctx, o.NATSExe, e.dir); err != nil {
		return e, err
	}
	if e.db, err = pgtemp.Create(ctx, o.AdminURL, "hookbridge_bench_delivery", ""); err != nil {
		return e, err
	}
	e.config = filepath.Join(e.dir, "hookbridge.yaml")
	if err := os.WriteFile(e.config, deliveryYAML(endpoints, o), 0o600); err != nil {
		return e, fmt.Errorf("configuration: %w", err)
	}
	return e, nil
}

// instance adds a serve instance named name with roles; it is not started.
func (e *deliveryEnv) instance(name string, roles ...string) (*clusterInstance, error) {
	in, err := newClusterInstance(name, e.dir, e.natsURL, e.db.URL, e.config)
	if err != nil {
		return nil, err
	}
	in.roles = roles
	e.instances = append(e.instances, in)
	return in, nil
}

// start starts in; the first start migrates the database, after which the
// bench's pool can open.
func (e *deliveryEnv) start(ctx context.Context, in *clusterInstance) error {
	if err := in.start(ctx, e.o.Exe); err != nil {
		return err
	}
	if e.pool != nil {
		return nil
	}
	var err error
	if e.pool, err = openPool(ctx, e.db.URL); err != nil {
		return err
	}
	// serve migrates in the background of its readiness: the bench
	// migrates too (under the same lock, so it waits for serve's or does
	// the work itself) before it enqueues.
	if _, err := schema.Migrate(ctx, e.pool, schema.Core()); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// close stops every process and drops the database; with keep, or when a
// process did not stop cleanly, the directory with the logs stays and is
// returned.
func (e *deliveryEnv) close(keep bool) (string, error) {
	var errs []error
	for _, in := range e.instances {
		errs = append(errs, in.stop())
	}
	if e.pool != nil {
		e.pool.Close()
	}
	if e.nats != nil {
		errs = append(errs, e.nats.stop(10*time.Second))
	}
	if e.db != nil {
		errs = append(errs, e.db.Drop())
	}
	err := errors.Join(errs...)
	if err != nil || keep {
		return e.dir, err
	}
	if e.dir != "" {
		return "", os.RemoveAll(e.dir)
	}
	return "", nil
}

// enqueue writes msgs to the outbox in one transaction.
func (e *deliveryEnv) enqueue(ctx context.Context, msgs []publisher.Message) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		return publisher.EnqueueBatch(ctx, tx, msgs)
	})
}

// pace enqueues n messages made by msg at rate per second (in
// transactions of what is due every 10 ms), or all at once in batches of
// 500 when rate is 0.
func (e *deliveryEnv) pace(ctx context.Context, rate float64, n int, msg func(i int) publisher.Message) error {
	start := time.Now()
	for sent := 0; sent < n; {
		due := n
		if rate > 0 {
			due = min(n, int(rate*time.Since(start).Seconds())+1)
		}
		due = min(due, sent+500)
		if due > sent {
			batch := make([]publisher.Message, 0, due-sent)
			for i := sent; i < due; i++ {
				batch = append(batch, msg(i))
			}
			if err := e.enqueue(ctx, batch); err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
			if e.committed != nil {
				e.committed(batch)
			}
			sent = due
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// awaitDurables waits up to a minute for the durables of n endpoints on
// EVENTS: serve answers ready before its delivery role has made them, and
// a durable made after an event was published never reads that event.
func (e *deliveryEnv) awaitDurables(ctx context.Context, n int) error {
	nc, err := nats.Connect(e.natsURL, nats.Name("hookbridge-bench"))
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	count := func() int {
		s, err := js.Stream(ctx, "EVENTS")
		if err != nil {
			return 0
		}
		found := 0
		for name := range s.ListConsumers(ctx).Info() {
			if strings.HasPrefix(name.Name, "delivery_") {
				found++
			}
		}
		return found
	}
	if !awaitCount(ctx, n, time.Minute, count) {
		return fmt.Errorf("%d of %d endpoint durables on EVENTS after a minute", count(), n)
	}
	return nil
}

// deadLetters counts the unresolved delivery dead letters.
func (e *deliveryEnv) deadLetters(ctx context.Context) (int, error) {
	counts, err := store.DeliveryDeadLetterCount(ctx, e.pool)
	n := 0
	for _, c := range counts {
		n += c.Count
	}
	return n, err
}

// receiver is an HTTP server the bench runs as the endpoints' receiver,
// on a fixed loopback address so that it can go down and come back.
type receiver struct {
	addr    string
	handler http.Handler
	mu      sync.Mutex
	srv     *http.Server
}

func startReceiver(h http.Handler) (*receiver, error) {
	r := &receiver{handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	return r, nil
}

func (r *receiver) url(path string) string { return "http://" + r.addr + path }

func (r *receiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// down closes the listener and every connection: the endpoint's
// connections are refused until up.
func (r *receiver) down() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		return nil
	}
	err := r.srv.Close()
	r.srv = nil
	return err
}

// up listens on the same address again.
func (r *receiver) up() error {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("receiver back on %s: %w", r.addr, err)
	}
	r.serve(ln)
	return nil
}

// awaitCount waits until n() reaches want (true), or no progress came for
// settle (false), or ctx ended.
func awaitCount(ctx context.Context, want int, settle time.Duration, n func() int) bool {
	last, since := -1, time.Now()
	for {
		got := n()
		if got >= want {
			return true
		}
		if got != last {
			last, since = got, time.Now()
		} else if time.Since(since) > settle {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}
