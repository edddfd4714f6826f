package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// unreachableDB is a database URL nothing listens on.
const unreachableDB = "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"

// postPadded sends a signed order.created of about 1 KiB for order id and
// returns the status and the Retry-After header.
func postPadded(t *testing.T, addr, id string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"type": orders.Created, "note": strings.Repeat("p", 900),
		"data": map[string]any{"order_id": id, "amount_cents": 5, "currency": "EUR"}})
	req, err := hookbridgetest.NewSignedRequest(context.Background(), "http://"+addr+"/webhooks/demo", hookbridgetest.Delivery{Secret: testSecret, ID: id, Time: time.Now(), Body: body})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// fillHooks posts n padded orders ("<prefix>-<i>") and returns the ids
// answered 202 and how many were answered 503, checking that every other
// answer is one of the two and every 503 carries Retry-After.
func fillHooks(t *testing.T, addr, prefix string, n int) (accepted []string, refused int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		switch code, retry := postPadded(t, addr, id); code {
		case http.StatusAccepted:
			accepted = append(accepted, id)
		case http.StatusServiceUnavailable:
			if retry == "" {
				t.Fatalf("%s: 503 without Retry-After", id)
			}
			refused++
		default:
			t.Fatalf("%s: status %d, want 202 or 503", id, code)
		}
	}
	return accepted, refused
}

// TestFullHooksRefusesInsteadOfDropping posts 600 signed ~1 KiB orders to
// an instance whose HOOKS is limited to 256 KiB while Postgres is
// unreachable. Past the limit the answer must be 503 with Retry-After;
// once Postgres is back every delivery answered 202 must be applied:
// counted in the inbox and in the orders table. With a discard-old
// policy all 600 would be answered 202 and the oldest deleted unapplied.
func TestFullHooksRefusesInsteadOfDropping(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	edit := func(dbURL string) func(*Config) {
		return func(c *Config) {
			c.DataDir, c.DatabaseURL = dataDir, dbURL
			c.Streams.MaxBytes = 256 << 10
		}
	}
	first := startServer(t, testConfig(t, ordersHandlers(), edit(unreachableDB)), ordersHandlers())
	accepted, refused := fillHooks(t, first.addr, "full", 600)
	if refused == 0 || len(accepted) == 0 {
		t.Fatalf("%d accepted, %d refused: want both (the limit holds about 200)", len(accepted), refused)
	}
	if n := streamInfo(t, first.js, stream.Hooks).State.Msgs; n != uint64(len(accepted)) {
		t.Fatalf("HOOKS holds %d messages, want the %d accepted", n, len(accepted))
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	db := hookbridgetest.Postgres(t)
	startServer(t, testConfig(t, ordersHandlers(), edit(db.URL)), ordersHandlers())
	requireAllApplied(t, db, accepted)
}

// retryFor is how long postRetried retries one delivery refused with 503.
// A delivery is refused until the consumers have applied enough of the
// stream for the guard to trim it: how long that takes is the machine's
// speed, so the bound is wide and only stops a test that makes no
// progress at all.
const retryFor = 2 * time.Minute

// postRetried posts n padded orders ("<prefix>-<i>"), each retried on 503
// every 20ms as a sender would, and returns their ids. Any other answer,
// or a 503 still there after retryFor, fails the test.
func postRetried(t *testing.T, addr, prefix string, n int) []string {
	t.Helper()
	var accepted []string
	refused, most := 0, 0
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		giveUp := time.Now().Add(retryFor)
		for attempt := 0; ; attempt++ {
			code, _ := postPadded(t, addr, id)
			if code == http.StatusAccepted {
				accepted = append(accepted, id)
				most = max(most, attempt)
				break
			}
			if code != http.StatusServiceUnavailable || time.Now().After(giveUp) {
				t.Fatalf("%s: status %d after %d attempts", id, code, attempt+1)
			}
			refused++
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("%d deliveries accepted; 503 answered %d times in all, at most %d times to one delivery", n, refused, most)
	return accepted
}

// requireAllApplied waits until the inbox holds the accepted deliveries,
// then checks it holds exactly those and an order row stands for each.
func requireAllApplied(t *testing.T, db *hookbridgetest.Database, accepted []string) {
	t.Helper()
	hookbridgetest.Eventually(t, 2*time.Minute, "every accepted delivery applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") >= len(accepted)
	})
	time.Sleep(200 * time.Millisecond) // room for a wrong extra apply to show
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != len(accepted) {
		t.Fatalf("inbox rows = %d, want %d", n, len(accepted))
	}
	if n := db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = ANY($1)", accepted); n != len(accepted) {
		t.Fatalf("orders = %d of the %d accepted", n, len(accepted))
	}
}

// startFastGuard starts serve with cfg and a storage guard that checks
// every 50ms, so a test sees trimming without waiting the default
// interval.
func startFastGuard(t *testing.T, cfg Config) *runningServer {
	t.Helper()
	srv, err := NewServer(cfg, ordersHandlers(), nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv.guardInterval = 50 * time.Millisecond
	return startPrepared(t, srv)
}

func readyStatus(t *testing.T, addr, query string) int {
	t.Helper()
	return getStatus(t, "http://"+addr+"/readyz"+query)
}

// TestFullHooksRecoversOnceApplied fills HOOKS (max_bytes 256 KiB) while
// Postgres is unreachable: the ingress's readiness must turn red. After a
// restart with Postgres back, the consumers apply everything, the storage
// guard trims HOOKS below their ack floor, readiness turns green and new
// deliveries are accepted again, while the stream keeps every message not
// yet applied: every delivery answered 202, before and after, is applied
// (rows counted). Before, HOOKS kept its messages by age and stayed full,
// 503 for every delivery across restarts, with readiness green.
func TestFullHooksRecoversOnceApplied(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	config := func(dbURL string) Config {
		return testConfig(t, ordersHandlers(), func(c *Config) {
			c.DataDir, c.DatabaseURL = dataDir, dbURL
			c.Streams.MaxBytes = 256 << 10
		})
	}
	start := func(cfg Config) *runningServer { return startFastGuard(t, cfg) }

	first := start(config(unreachableDB))
	accepted, refused := fillHooks(t, first.addr, "before", 400)
	if refused == 0 {
		t.Fatalf("all %d accepted: the limit was not reached", len(accepted))
	}
	hookbridgetest.Eventually(t, time.Minute, "ingress not ready while HOOKS is full", func() bool {
		return readyStatus(t, first.addr, "?role=ingress") == http.StatusServiceUnavailable
	})
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	db := hookbridgetest.Postgres(t)
	second := start(config(db.URL))
	hookbridgetest.Eventually(t, 2*time.Minute, "the backlog applied and the ingress ready again", func() bool {
		return readyStatus(t, second.addr, "?role=ingress") == http.StatusOK
	})
	// New deliveries, retried on 503 as a sender would.
	accepted = append(accepted, postRetried(t, second.addr, "after", 300)...)
	requireAllApplied(t, db, accepted)
	info := streamInfo(t, second.js, stream.Hooks)
	if info.State.FirstSeq == 1 || info.State.LastSeq != uint64(len(accepted)) {
		t.Fatalf("HOOKS first seq %d, last %d: want trimmed, and %d stored in all", info.State.FirstSeq, info.State.LastSeq, len(accepted))
	}
	t.Logf("%d accepted in all (%d refused while Postgres was down); HOOKS now seq %d–%d, %d bytes",
		len(accepted), refused, info.State.FirstSeq, info.State.LastSeq, info.State.Bytes)
}

// TestFullServerStoreRecovers runs serve against a NATS server whose whole
// JetStream store is 512 KiB: no stream limit is reached, the server
// refuses with "insufficient resources", which only the ingress's refused
// publishes show. Readiness must turn red; once the consumers have applied
// the backlog (after a restart with Postgres back), a refused delivery
// makes the guard trim what every consumer has acked, and deliveries are
// accepted again; every 202 is applied (rows counted).
func TestFullServerStoreRecovers(t *testing.T) {
	t.Parallel()
	natsURL := loopbackNATS(t, func(o *server.Options) { o.JetStreamMaxStore, o.JetStreamMaxMemory = 512<<10, 1<<20 })
	start := func(dbURL string) *runningServer {
		return startFastGuard(t, testConfig(t, ordersHandlers(), func(c *Config) { c.NATSURL, c.DatabaseURL = natsURL, dbURL }))
	}

	first := start(unreachableDB)
	accepted, refused := fillHooks(t, first.addr, "before", 500)
	if refused == 0 {
		t.Fatalf("all %d accepted: the store did not fill", len(accepted))
	}
	if got := readyStatus(t, first.addr, "?role=ingress"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz?role=ingress = %d while the store refuses, want 503", got)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	db := hookbridgetest.Postgres(t)
	second := start(db.URL)
	hookbridgetest.Eventually(t, 2*time.Minute, "the backlog applied", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") >= len(accepted)
	})
	accepted = append(accepted, postRetried(t, second.addr, "after", 200)...)
	requireAllApplied(t, db, accepted)
	info := streamInfo(t, second.js, stream.Hooks)
	t.Logf("%d accepted (%d refused while the store was full); HOOKS now seq %d–%d", len(accepted), refused, info.State.FirstSeq, info.State.LastSeq)
	if info.State.FirstSeq == 1 {
		t.Fatal("HOOKS was never trimmed")
	}
}
