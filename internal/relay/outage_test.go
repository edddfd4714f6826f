package relay_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
)

// lines returns the logged lines containing every one of parts.
// pgGate is a TCP port in front of Postgres that refuses connections
// (nothing listens) until opened, then forwards them.
type pgGate struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	ln   net.Listener
	wg   sync.WaitGroup
	open []net.Conn
}

func newPGGate(t *testing.T) *pgGate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &pgGate{t: t, addr: ln.Addr().String()}
	ln.Close() // refused until opened
	t.Cleanup(g.close)
	return g
}

// url is db's URL with the host replaced by the gate.
func (g *pgGate) url(db *hookbridgetest.Database) string {
	u, err := url.Parse(db.URL)
	if err != nil {
		g.t.Fatal(err)
	}
	u.Host = g.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	return u.String()
}

func (g *pgGate) openGate() {
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatalf("reopen %s: %v", g.addr, err)
	}
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", "127.0.0.1:5432")
			if err != nil {
				c.Close()
				continue
			}
			g.mu.Lock()
			g.open = append(g.open, c, up)
			g.mu.Unlock()
			g.wg.Add(2)
			go func() { defer g.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() { defer g.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

func (g *pgGate) close() {
	g.mu.Lock()
	if g.ln != nil {
		g.ln.Close()
	}
	for _, c := range g.open {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// gatedRelay builds (does not start) a relay that reaches db through a
// closed pgGate, logging at INFO into the returned buffer, with fastOpts
// (retries every 10-200ms: dozens of failures in a second) and no
// retention sweeps.
func gatedRelay(t *testing.T, db *hookbridgetest.Database) (*relay.Relay, *pgGate, *hookbridgetest.LogBuffer) {
	t.Helper()
	ns := hookbridgetest.NATS(t)
	gate := newPGGate(t)
	pool, err := pgxpool.New(context.Background(), gate.url(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &hookbridgetest.LogBuffer{}
	opts := fastOpts()
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts.Retention = -1
	return relay.NewRelay(pool, ns.JS, opts), gate, logs
}

// While Postgres is unreachable the relay logs one WARN per failing part
// (rounds, LISTEN connection) with the error, not one per retry; when it
// is back, one INFO each says so, and rows are published again.
func TestDatabaseOutageLoggedOnce(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	r, gate, logs := gatedRelay(t, db)
	outage := time.Now()
	runRelay(t, r)

	// Both parts meet the outage (in their own time on a loaded machine),
	// then it lasts at least 2 s: dozens of retries, none logged again.
	hookbridgetest.Eventually(t, time.Minute, "both parts' failures logged", func() bool {
		return len(logs.Lines("level=WARN", "outbox round failing")) > 0 && len(logs.Lines("level=WARN", "outbox listener failing")) > 0
	})
	time.Sleep(time.Until(outage.Add(2 * time.Second)))
	warns := logs.Lines("level=WARN")
	if len(warns) != 2 || len(logs.Lines("level=WARN", "outbox round failing", "connect")) != 1 ||
		len(logs.Lines("level=WARN", "outbox listener failing", "connect")) != 1 {
		t.Fatalf("%d WARN lines during a 2s outage, want one for rounds and one for the listener, each with the error:\n%s",
			len(warns), strings.Join(warns, "\n"))
	}

	gate.openGate()
	enqueue(t, db.Pool, msg("after-outage", ""))
	hookbridgetest.Eventually(t, time.Minute, "the row published after the outage", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`) == 1
	})
	hookbridgetest.Eventually(t, time.Minute, "both recoveries logged", func() bool {
		return len(logs.Lines("level=INFO", "outbox round recovered")) == 1 &&
			len(logs.Lines("level=INFO", "outbox listener recovered")) == 1
	})
	if n := len(logs.Lines("level=WARN")); n != 2 {
		t.Fatalf("WARN lines = %d after recovery, want still 2:\n%s", n, strings.Join(logs.Lines("level=WARN"), "\n"))
	}
}

// A failure that goes on is logged again at most once per repeat interval.
func TestOutageRepeatsRateLimited(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	r, _, logs := gatedRelay(t, db)
	const repeat = 500 * time.Millisecond
	relay.SetOutageRepeat(r, repeat)
	start := time.Now()
	runRelay(t, r)
	// Rounds fail every 10-200ms: one first line, then one per 500ms at
	// most, however long the machine takes to get there.
	hookbridgetest.Eventually(t, time.Minute, "two repeats logged", func() bool {
		return len(logs.Lines("outbox round still failing", "failures_not_logged=")) >= 2
	})
	first, again := logs.Lines("outbox round failing"), logs.Lines("outbox round still failing", "failures_not_logged=")
	elapsed := time.Since(start)
	if most := int(elapsed/repeat) + 1; len(first) != 1 || len(again) > most {
		t.Fatalf("round lines in %s with a %s repeat: %d first, %d repeats; want 1 and at most %d", elapsed, repeat, len(first), len(again), most)
	}
}
