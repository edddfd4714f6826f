package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// hungProxy forwards TCP connections to Postgres until it is frozen; from
// then on it swallows every byte in both directions and keeps the
// connections open, and new connections are accepted and never answered:
// a network partition, as the consumer sees it.
type hungProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startHungProxy(t *testing.T, target string) *hungProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hungProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *hungProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(in)
		if p.frozen.Load() {
			p.wg.Go(func() { _, _ = io.Copy(io.Discard, in) })
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.track(out)
		p.wg.Go(func() { p.pipe(out, in) })
		p.wg.Go(func() { p.pipe(in, out) })
	}
}

// pipe copies src to dst while the proxy is not frozen, and drops what it
// reads once it is.
func (p *hungProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *hungProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *hungProxy) freeze() { p.frozen.Store(true) }

func (p *hungProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// poolVia is a pool for db's database that connects through addr.
func poolVia(t *testing.T, db *hookbridgetest.Database, addr string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.ConnectTimeout = 0 // only the contexts bound the wait, as in production
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// fetchHooks publishes n events and fetches them as one consumer would.
func fetchHooks(t *testing.T, ns *hookbridgetest.JetStream, n int) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		ns.PublishHook(t, "demo", fmt.Sprintf("e%d", i), "thing.done", []byte(`{}`))
	}
	cons, err := ns.JS.CreateOrUpdateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{
		Durable: "hung", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != n {
		t.Fatalf("fetched %d messages, want %d", len(msgs), n)
	}
	return msgs
}

// When the database hangs, a failed batch is nak'd as a whole, with the
// backoff delay, and intake pauses at once; on the set-wise path, with a
// per-event handler and with a BatchHandler. It used to be retried one event
// at a time, each with a full handler timeout: 8 events at 300 ms took
// 2.7 s. Two shapes of hang: connections that are accepted and never
// answered, and a partition in the middle of the batch.
func TestHungDatabaseNaksTheWholeBatchAtOnce(t *testing.T) {
	t.Parallel()
	const n, timeout = 8, 300 * time.Millisecond
	for _, kind := range []string{"per-event", "batch"} {
		for _, when := range []string{"never-answers", "freezes-mid-batch"} {
			t.Run(fmt.Sprintf("handler=%s/%s", kind, when), func(t *testing.T) {
				t.Parallel()
				db := hookbridgetest.Postgres(t)
				ns := hookbridgetest.NATS(t)
				ns.EnsureHooks(t)
				proxy := startHungProxy(t, "127.0.0.1:5432")
				pool := poolVia(t, db, proxy.ln.Addr().String())
				t.Cleanup(proxy.close) // before the pool closes: it would wait on the frozen connections
				var calls atomic.Int32
				var h consumer.Handler = consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
					calls.Add(1)
					proxy.freeze()
					_, err := tx.Exec(ctx, "SELECT 1")
					return err
				})
				if kind == "batch" {
					h = freezingBatch{Handler: h, calls: &calls, freeze: proxy.freeze}
				}
				if when == "never-answers" {
					proxy.freeze()
				} else if err := pool.Ping(context.Background()); err != nil {
					t.Fatal(err) // one live connection, so the batch does begin
				}
				c, err := engine.New(pool, ns.JS, engine.Options{Name: "hung", EventTypes: []string{"thing.done"}, Handler: h,
					BatchSize: engine.DefaultBatchSize, HandlerTimeout: timeout, MaxDeliver: 2, Backoff: []time.Duration{7 * time.Second},
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					t.Fatal(err)
				}
				msgs := fetchHooks(t, ns, n)

				start := time.Now()
				actions := c.Process(context.Background(), msgs)
				elapsed := time.Since(start)

				for i, a := range actions {
					if !a.Nak || a.Delay != 7*time.Second {
						t.Errorf("message %d: action %+v, want nak after the 7s backoff", i, a)
					}
				}
				if !c.IntakeClosed() {
					t.Error("intake gate still open after the database hung")
				}
				// One handler timeout for the batch, one for the ping that
				// tells a hung database from a slow event; never one per event.
				if elapsed > 3*timeout {
					t.Fatalf("%d events took %s to nak, more than 3 handler timeouts (%s)", n, elapsed, 3*timeout)
				}
				if when == "freezes-mid-batch" && calls.Load() != 1 {
					t.Fatalf("handler ran %d times, want 1 (nothing retried against the hung database)", calls.Load())
				}
				if got := db.Count(t, "SELECT count(*) FROM hookbridge.delivery_failures"); got != 0 {
					t.Fatalf("%d failures counted toward max_deliver for an outage", got)
				}
				t.Logf("%d events nak'd after %s (%.1f handler timeouts)", n, elapsed, float64(elapsed)/float64(timeout))
			})
		}
	}
}

// freezingBatch is a BatchHandler whose HandleBatch partitions the network.
type freezingBatch struct {
	consumer.Handler
	calls  *atomic.Int32
	freeze func()
}

func (f freezingBatch) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	f.calls.Add(1)
	f.freeze()
	_, err := tx.Exec(ctx, "SELECT 1")
	return err
}
