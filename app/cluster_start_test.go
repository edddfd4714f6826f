package app

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/embedded"
)

// startFreshCluster starts a three-node JetStream cluster on loopback and
// returns its client URLs at once, before JetStream has a meta leader.
func startFreshCluster(t *testing.T) []string {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range 6 {
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
	var routes, urls []string
	for _, p := range ports[3:] {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			ns, err := embedded.Start(embedded.Options{
				StoreDir: t.TempDir(), Listen: true, Host: "127.0.0.1", Port: ports[i], ServerName: fmt.Sprintf("n%d", i),
				Cluster: &server.ClusterOpts{Name: "hbstart", Host: "127.0.0.1", Port: ports[3+i]}, Routes: routes,
			})
			if err != nil {
				t.Errorf("start node %d: %v", i, err)
				return
			}
			t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
			mu.Lock()
			urls = append(urls, ns.ClientURL())
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return urls
}

// TestTwoInstancesStartTogetherOnAFreshCluster starts a three-node cluster
// and, at once, two instances with every role on R3 streams sharing one
// database, and expects both to answer /readyz 200. The bound is loose
// (30 s) because CI machines are shared and run this under -race next to
// other packages; the start-up time itself is reported by the log line. Before,
// each stream request the cluster left unanswered (no meta leader yet; two
// clients creating the same stream at once) waited the client's 5 s
// default: 17–22 s here. Now 1.3–2.5 s.
func TestTwoInstancesStartTogetherOnAFreshCluster(t *testing.T) {
	t.Parallel()
	urls := startFreshCluster(t)
	t0 := time.Now()
	db := hookbridgetest.EmptyPostgres(t)
	var wg sync.WaitGroup
	took := make([]time.Duration, 2)
	logs := make([]*hookbridgetest.LogBuffer, 2)
	for i := range 2 {
		logs[i] = &hookbridgetest.LogBuffer{}
		wg.Go(func() {
			cfg := testConfig(t, ordersHandlers(), func(c *Config) {
				c.DatabaseURL = db.URL
				c.NATSURL = strings.Join(append(urls[i:], urls[:i]...), ",")
				c.Streams.Replicas = 3
			})
			srv, err := NewServer(cfg, ordersHandlers(), nil, slog.New(slog.NewTextHandler(logs[i], nil)))
			if err != nil {
				t.Error(err)
				return
			}
			rs := startPrepared(t, srv)
			for time.Since(t0) < time.Minute {
				if getStatus(t, "http://"+rs.addr+"/readyz") == http.StatusOK {
					took[i] = time.Since(t0)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("instance %d not ready after a minute; logs:\n%s", i, logs[i].String())
		})
	}
	wg.Wait()
	for i := range 2 {
		t.Logf("instance %d ready after %s", i, took[i].Round(time.Millisecond))
		if took[i] > 30*time.Second {
			t.Errorf("instance %d took %s to become ready; logs:\n%s", i, took[i].Round(time.Millisecond), logs[i].String())
		}
	}
}
