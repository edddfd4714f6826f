package acceptance

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// natsCluster is an in-process three-node JetStream cluster on loopback.
type natsCluster struct {
	nodes []*server.Server
	urls  []string
}

// freePorts reserves n distinct loopback ports and releases them for the
// servers to take.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

func startCluster(t *testing.T, size int) *natsCluster {
	t.Helper()
	ports := freePorts(t, 2*size)
	clientPorts, routePorts := ports[:size], ports[size:]
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	c := &natsCluster{}
	for i := range size {
		ns, err := embedded.Start(embedded.Options{
			StoreDir:   t.TempDir(),
			Listen:     true,
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			ServerName: fmt.Sprintf("n%d", i),
			Cluster:    &server.ClusterOpts{Name: "hbtest", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:     routes,
		})
		if err != nil {
			t.Fatalf("start node %d: %v", i, err)
		}
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		c.nodes = append(c.nodes, ns)
		c.urls = append(c.urls, ns.ClientURL())
	}
	return c
}

// connect connects to the cluster, trying node first (so two instances
// can sit on different nodes), reconnecting forever.
func (c *natsCluster) connect(t *testing.T, first int) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var urls []string
	for i := range c.urls {
		urls = append(urls, c.urls[(first+i)%len(c.urls)])
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// outcomeCounter is a consumer.Tracer that counts outcomes.
type outcomeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomeCounter) TraceApplyStart(ctx context.Context, _ engine.TraceApplyStartData) context.Context {
	return ctx
}

func (o *outcomeCounter) TraceApplyEnd(_ context.Context, d engine.TraceApplyEndData) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	for _, out := range d.Outcomes {
		o.n[out.String()]++
	}
}

func (o *outcomeCounter) TraceDeadLetterStart(ctx context.Context, _ engine.TraceDeadLetterStartData) context.Context {
	return ctx
}

func (o *outcomeCounter) TraceDeadLetterEnd(context.Context, engine.TraceDeadLetterEndData) {}

func (o *outcomeCounter) get(outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[outcome]
}

// hbInstance is one hookbridge instance: an ingress handler and an orders
// consumer with their own NATS connection and Postgres pool.
type hbInstance struct {
	url      string
	outcomes *outcomeCounter
}

func startInstance(t *testing.T, ctx context.Context, wg *sync.WaitGroup, c *natsCluster, node int, dbURL string) *hbInstance {
	t.Helper()
	_, js := c.connect(t, node)
	v, err := verify.NewStandardWebhooks([]string{secret}, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, typ := bridge.DefaultFields(verify.SchemeStandardWebhooks)
	h, err := bridge.New(js, bridge.Options{
		Sources:        []bridge.Source{{Name: "demo", Verifier: v, EventID: id, EventType: typ}},
		PublishTimeout: 2 * time.Second,
		RetryAfter:     time.Second,
		Logger:         quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(bridge.Pattern, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	outcomes := &outcomeCounter{}
	cons, err := engine.New(pool, js, engine.Options{
		Name:       "orders", // the same durable consumer in both instances
		Sources:    []string{"demo"},
		EventTypes: []string{orders.Created, orders.Paid, orders.Cancelled},
		Handler:    orders.Handler("orders"),
		BatchSize:  8,
		AckWait:    2 * time.Second,
		Backoff:    []time.Duration{100 * time.Millisecond},
		Logger:     quietLogger(),
		Tracer:     outcomes,
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := cons.Run(ctx); err != nil {
			t.Errorf("consumer on node %d: %v", node, err)
		}
	}()
	return &hbInstance{url: srv.URL + "/webhooks/demo", outcomes: outcomes}
}

// TestClusterNodeLossAppliesEveryEventOnce runs webhooks through two
// hookbridge instances (two ingress handlers, two consumers sharing one
// durable consumer and one database) against a three-node JetStream
// cluster with R3 streams, stops the HOOKS stream leader a third of the
// way through, and checks that every accepted event was applied exactly
// once. Senders retry 503s (honouring Retry-After) and connection errors,
// alternating between the instances as a load balancer would.
func TestClusterNodeLossAppliesEveryEventOnce(t *testing.T) {
	t.Parallel()
	const events, senders = 300, 8
	cluster := startCluster(t, 3)
	db := hookbridgetest.Postgres(t, orders.Migrations())
	_, adminJS := cluster.connect(t, 2)

	// Streams at replication 3, created as soon as the cluster has a
	// JetStream meta leader.
	opts := stream.Options{Replicas: 3}
	hookbridgetest.Eventually(t, time.Minute, "R3 streams", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return stream.EnsureIngress(ctx, adminJS, opts) == nil
	})
	hooks, err := adminJS.Stream(context.Background(), stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	if info := hooks.CachedInfo(); info.Config.Replicas != 3 {
		t.Fatalf("HOOKS replicas = %d, want 3", info.Config.Replicas)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var consumers sync.WaitGroup
	t.Cleanup(func() { cancel(); consumers.Wait() })
	inst := []*hbInstance{
		startInstance(t, ctx, &consumers, cluster, 0, db.URL),
		startInstance(t, ctx, &consumers, cluster, 1, db.URL),
	}

	// Stop the HOOKS leader once a third of the events were answered.
	var answered, n503, transportErrs, duplicates atomic.Int64
	killed := make(chan string, 1)
	var killedAt time.Time
	go func() {
		for answered.Load() < events/3 {
			time.Sleep(5 * time.Millisecond)
		}
		ictx, icancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer icancel()
		info, err := hooks.Info(ictx)
		if err != nil || info.Cluster == nil {
			killed <- ""
			return
		}
		for _, ns := range cluster.nodes {
			if ns.Name() == info.Cluster.Leader {
				killedAt = time.Now()
				ns.Shutdown()
				killed <- ns.Name()
				return
			}
		}
		killed <- ""
	}()

	start := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	var mu sync.Mutex
	final := map[string]int{} // event id -> final status
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= events {
					return
				}
				id := fmt.Sprintf("evt-%04d", i)
				body := orders.WebhookBody(orders.Created, fmt.Sprintf("o-%04d", i), int64(100+i))
				code := deliver(t, client, inst, i%2, id, body, &n503, &transportErrs)
				if code == http.StatusOK {
					duplicates.Add(1)
				}
				mu.Lock()
				final[id] = code
				mu.Unlock()
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	sendTime := time.Since(start)
	victim := <-killed
	if victim == "" {
		t.Fatal("could not find and stop the HOOKS stream leader")
	}
	for id, code := range final {
		if code != http.StatusAccepted && code != http.StatusOK {
			t.Fatalf("%s: final answer %d, want 202 (or 200 for a retry of a stored delivery)", id, code)
		}
	}
	if len(final) != events {
		t.Fatalf("%d events answered, want %d", len(final), events)
	}

	// Every accepted event is applied, once.
	hookbridgetest.Eventually(t, 2*time.Minute, "every event applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") >= events
	})
	hookbridgetest.Eventually(t, time.Minute, "the durable consumer to drain", func() bool {
		c, err := adminJS.Consumer(context.Background(), stream.Hooks, "orders")
		if err != nil {
			return false
		}
		info := c.CachedInfo()
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	applyTime := time.Since(start)
	cancel()
	consumers.Wait()

	checks := map[string]int{
		"SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'orders'":                               events,
		"SELECT count(DISTINCT event_id) FROM hookbridge.inbox":                                         events,
		"SELECT count(*) FROM demo.orders":                                                              events,
		"SELECT count(*) FROM demo.orders WHERE version = 1":                                            events,
		"SELECT count(*) FROM hookbridge.outbox":                                                        events,
		"SELECT count(*) FROM hookbridge.conflicts":                                                     0,
		"SELECT count(*) FROM hookbridge.dead_letters":                                                  0,
		"SELECT count(*) FROM demo.orders o JOIN hookbridge.inbox i ON i.event_id = o.created_event_id": events,
	}
	for q, want := range checks {
		if got := db.Count(t, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	processed := inst[0].outcomes.get("processed") + inst[1].outcomes.get("processed")
	dupApplies := inst[0].outcomes.get("duplicate") + inst[1].outcomes.get("duplicate")
	if processed != events {
		t.Errorf("processed outcomes = %d, want exactly %d", processed, events)
	}
	stored := hooksMsgs(t, adminJS)
	if stored != events {
		t.Errorf("HOOKS holds %d messages, want %d (retries must be de-duplicated across the leader change)", stored, events)
	}
	t.Logf("%d events, %d senders, 2 instances, R3 on 3 nodes; stopped %s (HOOKS leader) %s after start",
		events, senders, victim, killedAt.Sub(start).Round(time.Millisecond))
	t.Logf("answers: %d x 202, %d x 200 duplicate (a retry of a stored delivery); %d x 503 and %d connection errors retried",
		int64(events)-duplicates.Load(), duplicates.Load(), n503.Load(), transportErrs.Load())
	t.Logf("applies: %d processed (instance A %d, B %d), %d redeliveries absorbed as duplicates; HOOKS %d messages; sent in %s, all applied in %s",
		processed, inst[0].outcomes.get("processed"), inst[1].outcomes.get("processed"), dupApplies, stored,
		sendTime.Round(time.Millisecond), applyTime.Round(time.Millisecond))
}

// deliver posts one event until it gets a final answer, as a sender
// would: 503 waits Retry-After, a connection error waits a little, and
// each retry goes to the other instance (the load balancer's choice).
func deliver(t *testing.T, client *http.Client, inst []*hbInstance, target int, id string, body []byte, n503, transportErrs *atomic.Int64) int {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Errorf("%s: no final answer within 2m", id)
			return 0
		}
		req, err := hookbridgetest.NewSignedRequest(context.Background(), inst[target].url, hookbridgetest.Delivery{Secret: secret, ID: id, Time: time.Now(), Body: body})
		if err != nil {
			t.Error(err)
			return 0
		}
		wait := 200 * time.Millisecond
		resp, err := client.Do(req)
		if err != nil {
			transportErrs.Add(1)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusAccepted, http.StatusOK:
				return resp.StatusCode
			case http.StatusServiceUnavailable:
				n503.Add(1)
				if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
					wait = time.Duration(s) * time.Second
				}
			default:
				return resp.StatusCode
			}
		}
		target = 1 - target
		time.Sleep(wait)
	}
}

func hooksMsgs(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	var n int
	hookbridgetest.Eventually(t, time.Minute, "HOOKS info", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream.Hooks)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err != nil {
			return false
		}
		n = int(info.State.Msgs)
		return true
	})
	return n
}
