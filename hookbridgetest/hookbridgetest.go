// Package hookbridgetest is the test kit for hookbridge handlers, and the
// one hookbridge's own tests use. Each test gets real infrastructure of its
// own, nothing mocked: a fresh Postgres database migrated with hookbridge's
// schema and the team's [schema.Set]s ([Postgres]), an embedded JetStream
// server ([NATS]), the consumer's real apply path ([Database.Apply]: inbox
// claim, handler, commit, exactly as serve applies a batch), helpers that
// read and assert the outbox ([Database.Outbox], [Database.RequireOutbox]),
// signed webhook requests for every scheme ([SignedRequest]), waits on
// asynchronous state ([Eventually], [Database.AwaitCount]) and a
// goroutine check for TestMain ([VerifyNoLeaks]). Tests using it can run
// in parallel and be repeated. An Example function, which has no
// *testing.T, gets the [testing.TB] the helpers take from [Example], so
// that its printed output is checked against a real database too.
//
// The databases are created on HOOKBRIDGE_TEST_DATABASE_URL, else on the
// local Postgres (127.0.0.1:5432, user postgres, trust authentication). A
// missing Postgres fails the test; it is never a skip.
//
// The kit is for tests only: no package of hookbridge's product imports it.
package hookbridgetest

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/pgtemp"
	"github.com/hookbridge/hookbridge/schema"
)

// AdminURL is the Postgres the tests create their databases in. It is
// HOOKBRIDGE_TEST_DATABASE_URL, else the local server with trust auth.
func AdminURL() string {
	if u := os.Getenv("HOOKBRIDGE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// JetStream is a running embedded server and a client connected to it.
type JetStream struct {
	Server *server.Server
	Conn   *nats.Conn
	JS     jetstream.JetStream
}

// URL is the server's client URL (only when started with Listen).
func (j *JetStream) URL() string { return j.Server.ClientURL() }

// NATS starts an embedded JetStream server listening on a random loopback
// port with its store in a temporary directory, and connects to it. Both
// stop when the test ends.
func NATS(t testing.TB) *JetStream {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: true, Port: -1})
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect embedded nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return &JetStream{Server: ns, Conn: nc, JS: js}
}

// Database is a fresh database for one test.
type Database struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

// Postgres creates a database for the test with hookbridge's migrations
// (and any extra sets) applied, and drops it when the test ends. It is a
// copy of a template database migrated once per distinct set of
// migrations (see [template]), which is much cheaper than migrating each
// test's database. It fails the test loudly when Postgres is unreachable:
// a missing service is an error, never a skip.
func Postgres(t testing.TB, sets ...schema.Set) *Database {
	t.Helper()
	sets = append([]schema.Set{schema.Core()}, sets...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl, err := template(ctx, sets)
	if err != nil {
		t.Fatalf("migrated template database: %v", err)
	}
	return createDatabase(t, tpl)
}

// EmptyPostgres is [Postgres] without migrations.
func EmptyPostgres(t testing.TB) *Database {
	t.Helper()
	return createDatabase(t, "")
}

// createDatabase creates a fresh database, a copy of tpl when tpl is not
// empty, and drops it when the test ends.
func createDatabase(t testing.TB, tpl string) *Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgtemp.Create(ctx, AdminURL(), "hbtest", tpl)
	if err != nil {
		t.Fatalf("test database on %s (start postgres; tests never skip): %v", redact(AdminURL()), err)
	}
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		_ = db.Drop()
		t.Fatalf("connect test database: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		if err := db.Drop(); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	return &Database{Name: db.Name, URL: db.URL, Pool: pool}
}

// Count runs a count(*) query and fails the test on error.
func (d *Database) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := d.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", query, err)
	}
	return n
}

// StreamMsgs returns how many messages a stream holds.
func (j *JetStream) StreamMsgs(t testing.TB, name string) uint64 {
	t.Helper()
	s, err := j.JS.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info.State.Msgs
}

// Eventually polls cond every 10 ms until it is true or timeout passes.
// A test waits on the state it asserts, never on time: give it a
// generous timeout (a minute: a loaded 2-core machine takes tens of
// seconds for what takes milliseconds on a quiet one).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AwaitCount runs a count(*) query until it counts want, and returns
// it: the rows of an asynchronous apply or publish take their time on a
// loaded machine. After a minute without the count it fails the test,
// naming the query and the count it read last, so a caller that goes on
// never asserts on a state that was not reached.
func (d *Database) AwaitCount(t testing.TB, want int, query string, args ...any) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n := d.Count(t, query, args...)
		if n == want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute %q counts %d, want %d", query, n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
