package admin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The browser tests drive the console in a real headless Chromium
// against a real `serve` (ingress, orders consumer, relay, admin
// listener) over Postgres and an embedded JetStream server, and check
// every action's effect in the tables.

const (
	browserToken = "console-browser-test-token-0123456789"
	// demoSecret is the Standard Webhooks reference library's test secret.
	demoSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// brokenOrder is the order id the test handler refuses until fixed.
	brokenOrder = "o-broken"
)

// chromiumPath finds the browser; without one the test fails (it is part
// of the suite, not optional).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH): " +
		"install it with `apt-get install -y chromium` (Debian/Ubuntu); .ci/run does this in CI")
	return ""
}

// fixableOrders is the orders handler, except that an order with id
// brokenOrder fails permanently (dead-lettered on its first delivery)
// until fixed is set: a bug an operator fixes, then requeues.
func fixableOrders(fixed *atomic.Bool) app.Handlers {
	h := builtin.Handlers()
	spec := h["orders"]
	inner := spec.New
	spec.New = func(name string) consumer.Handler {
		next := inner(name)
		return consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if !fixed.Load() && bytes.Contains(ev.Body, []byte(`"`+brokenOrder+`"`)) {
				return consumer.Permanent(errors.New("order " + brokenOrder + ": the handler cannot apply it yet"))
			}
			return next.Handle(ctx, tx, ev)
		})
	}
	h["orders"] = spec
	return h
}

// consoleServe is a running serve with the admin listener on.
type consoleServe struct {
	db        *hookbridgetest.Database
	js        *hookbridgetest.JetStream
	httpAddr  string
	adminAddr string
}

func startConsoleServe(t *testing.T, handlers app.Handlers) *consoleServe {
	t.Helper()
	return startConsoleServeWith(t, handlers, nil)
}

// startConsoleServeWith is startConsoleServe with the configuration
// changed by configure (nil: unchanged) before it is completed.
func startConsoleServeWith(t *testing.T, handlers app.Handlers, configure func(*app.Config)) *consoleServe {
	t.Helper()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	js := hookbridgetest.NATS(t)
	env := func(k string) (string, bool) {
		if k == "HOOKBRIDGE_DEMO_SECRET" {
			return demoSecret, true
		}
		return "", false
	}
	cfg := app.Config{HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", AdminToken: browserToken,
		DatabaseURL: db.URL, NATSURL: js.URL(), DataDir: t.TempDir()}
	cfg.ApplyEnv(env)
	cfg.Sources = app.DefaultSources(env)
	cfg.Consumers = app.DefaultConsumers()
	cfg.Relay.PollInterval = 200 * time.Millisecond
	if configure != nil {
		configure(&cfg)
	}
	if err := cfg.Complete(env, handlers); err != nil {
		t.Fatal(err)
	}
	srv, err := app.NewServer(cfg, handlers, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { addrCh <- addr }) }()
	s := &consoleServe{db: db, js: js}
	select {
	case s.httpAddr = <-addrCh:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("serve did not stop")
		}
	})
	hookbridgetest.Eventually(t, time.Minute, "admin listener and readyz", func() bool {
		s.adminAddr = srv.AdminAddr()
		resp, err := http.Get("http://" + s.httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return s.adminAddr != "" && resp.StatusCode == http.StatusOK
	})
	return s
}

// post sends a signed order webhook and returns the status.
func (s *consoleServe) post(t *testing.T, id, orderID string, cents int64) int {
	t.Helper()
	req := hookbridgetest.SignedRequest(t, "http://"+s.httpAddr+"/webhooks/demo",
		hookbridgetest.Delivery{Secret: demoSecret, ID: id, Body: orders.WebhookBody(orders.Created, orderID, cents)})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// postBody sends a signed webhook with body and returns the status.
func (s *consoleServe) postBody(t *testing.T, id string, body []byte) int {
	t.Helper()
	req := hookbridgetest.SignedRequest(t, "http://"+s.httpAddr+"/webhooks/demo",
		hookbridgetest.Delivery{Secret: demoSecret, ID: id, Body: body})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (s *consoleServe) id(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	var id int64
	if err := s.db.Pool.QueryRow(context.Background(), query, args...).Scan(&id); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return id
}

// browser is one headless Chromium tab, with the page's uncaught
// exceptions collected and screenshots written to dir.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
	n   int

	mu         sync.Mutex
	exceptions []string
}

func newBrowser(t *testing.T, execPath string) *browser {
	t.Helper()
	dir, err := os.MkdirTemp("", "hookbridge-console-")
	if err != nil {
		t.Fatal(err)
	}
	// Kept after the test so the screenshots can be looked at.
	t.Logf("screenshots in %s", dir)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox refuses to start
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	// Each wait below may take up to settle on a loaded machine; the whole
	// walk-through gets room for many of them.
	ctx, cancelTime := context.WithTimeout(ctx, 15*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx, dir: dir}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium %s: %v", execPath, err)
	}
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
			b.mu.Lock()
			b.exceptions = append(b.exceptions, msg)
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs steps; on failure it saves a screenshot and the page's
// messages before failing the test.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	b.shot("failed")
	flash, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(document.getElementById("flash")||{}).textContent||""`))
	hash, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.hash`))
	b.t.Fatalf("%s: %v (page %s, message %q, exceptions %v)", what, err, hash, flash, b.pageExceptions())
}

// settle is how long a read of the console waits for the state it
// asserts: the overview refreshes every 3 s from the server's view, which
// itself follows the consumers (a partition assignment, a pin, a backlog)
// a loaded CI machine can take tens of seconds to reach.
const settle = time.Minute

// until waits for a JavaScript condition to be true.
func (b *browser) until(what, cond string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](cond,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(settle))); err != nil {
		b.fail("waiting for "+what, err)
	}
}

// textWhen reads sel's text until ok accepts it or settle passes, and
// returns the text it read last, for the caller's assertion: a state
// shown asynchronously is waited for, and a miss reports what was shown.
func (b *browser) textWhen(sel string, ok func(string) bool) string {
	b.t.Helper()
	deadline := time.Now().Add(settle)
	for {
		s := b.text(sel)
		if ok(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// evalWhen evaluates expr until it is true or settle passes, and returns
// its last value.
func (b *browser) evalWhen(expr string) bool {
	b.t.Helper()
	deadline := time.Now().Add(settle)
	for {
		if v := b.eval(expr); v || time.Now().After(deadline) {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// is accepts exactly want (for textWhen).
func is(want string) func(string) bool { return func(s string) bool { return s == want } }

// has accepts a text holding every one of parts (for textWhen).
func has(parts ...string) func(string) bool {
	return func(s string) bool {
		for _, p := range parts {
			if !strings.Contains(s, p) {
				return false
			}
		}
		return true
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	// textContent, not innerText: it reads inside closed <details> too.
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||""`, sel)))
	if err != nil {
		b.fail("read "+sel, err)
	}
	return s
}

func (b *browser) eval(expr string) bool {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		b.fail("evaluate "+expr, err)
	}
	return v
}

// shot saves a full-page PNG and logs its path.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.n++
	p := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.n, name))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", p)
}

func (b *browser) pageExceptions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.exceptions...)
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// login opens the console at base and logs in with the right token.
func (b *browser) login(base string) {
	b.t.Helper()
	b.do("open the console", chromedp.Navigate(base), chromedp.WaitVisible(css("#login-token")))
	b.do("log in", chromedp.SetValue(css("#login-token"), browserToken), chromedp.Click(css("#login-submit")))
	b.until("the overview", `!document.getElementById("page-overview").hidden && document.getElementById("ov-ready") !== null`)
}

// TestConsoleInBrowser walks an operator through the console: log in
// (a wrong token first), watch a dead letter appear on the live overview,
// try to requeue it before the cause is fixed (refused, nothing applied),
// fix it and requeue it (applied once, resolved), compare a conflict's two
// bodies and resolve it, then dry-run a replay and apply it with progress
// after a business row was lost — each effect counted in the tables.
// Last, the overview and a conflict on a phone-sized screen must not
// scroll sideways.
func TestConsoleInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	var fixed atomic.Bool
	s := startConsoleServe(t, fixableOrders(&fixed))
	b := newBrowser(t, chrome)
	base := "http://" + s.adminAddr + "/"

	// Log in: a wrong token is refused, the right one opens the overview.
	b.do("open the console", chromedp.Navigate(base), chromedp.WaitVisible(css("#login-token")))
	b.shot("login")
	b.do("log in with a wrong token", chromedp.SendKeys(css("#login-token"), "not-the-token"), chromedp.Click(css("#login-submit")))
	b.until("the refusal", `document.getElementById("login-error").textContent.includes("refused")`)
	b.do("log in", chromedp.SetValue(css("#login-token"), browserToken), chromedp.Click(css("#login-submit")))
	b.until("the overview", `!document.getElementById("page-overview").hidden && document.getElementById("ov-ready") !== null`)
	if !b.eval(fmt.Sprintf(`sessionStorage.getItem("hookbridge.admin_token") === %q && document.cookie === ""`, browserToken)) {
		t.Fatal("the token is not kept in sessionStorage only")
	}
	if b.eval(`[...document.querySelectorAll("#ov-consumers tr[data-consumer]")].some(r => r.dataset.consumer !== "orders" && r.querySelector("button"))`) {
		t.Error("an internal consumer offers Pause")
	}
	if got := b.text("#ov-dead-letters"); got != "0" {
		t.Fatalf("dead letters before any event: %q, want 0", got)
	}

	// A dead letter appears on the live overview.
	if code := s.post(t, "evt-good-1", "o-1", 100); code != http.StatusAccepted {
		t.Fatalf("evt-good-1: status %d", code)
	}
	if code := s.post(t, "evt-broken", brokenOrder, 200); code != http.StatusAccepted {
		t.Fatalf("evt-broken: status %d", code)
	}
	b.until("the dead letter on the overview", `document.getElementById("ov-dead-letters").textContent === "1"`)
	b.shot("overview-dead-letter")
	dl := s.id(t, "SELECT id FROM hookbridge.dead_letters WHERE event_id = 'evt-broken' AND resolved_at IS NULL")
	row := fmt.Sprintf(`#dl-list tr[data-id="%d"]`, dl)
	b.do("open the dead letters", chromedp.Click(css("#ov-dead-letters")), chromedp.WaitVisible(css(row)))
	b.shot("dead-letters")
	b.do("open the dead letter", chromedp.Click(css(row+" a")), chromedp.WaitVisible(css("#dl-requeue")))
	if body := b.text("#dl-body"); !strings.Contains(body, `"order_id": "`+brokenOrder+`"`) {
		t.Fatalf("dead letter body shown as %q, want the pretty-printed order", body)
	}
	if e := b.text("#dl-last-error"); !strings.Contains(e, "cannot apply it yet") {
		t.Fatalf("last error shown as %q", e)
	}
	b.shot("dead-letter")

	// Requeue before the fix: refused, nothing applied, still unresolved.
	b.do("requeue before the fix", chromedp.Click(css("#dl-requeue")))
	b.until("the refusal", `document.getElementById("flash").textContent.includes("Requeue failed")`)
	b.shot("requeue-refused")
	if n := s.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = $1", brokenOrder); n != 0 {
		t.Fatalf("orders %s = %d after a failed requeue, want 0", brokenOrder, n)
	}
	if n := s.db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolved_at IS NULL", dl); n != 1 {
		t.Fatal("a failed requeue resolved the dead letter")
	}

	// Fix the cause, requeue: applied once, resolved "requeued".
	fixed.Store(true)
	b.until("the requeue button back", `!document.getElementById("dl-requeue").disabled`)
	b.do("requeue after the fix", chromedp.Click(css("#dl-requeue")))
	b.until("the dead letter resolved", `(document.getElementById("dl-detail-status")||{textContent:""}).textContent.includes("requeued")`)
	b.shot("dead-letter-requeued")
	if b.eval(`document.getElementById("dl-requeue") !== null`) {
		t.Error("a resolved dead letter still offers Requeue")
	}
	counts := map[string]int{
		"SELECT count(*) FROM demo.orders WHERE order_id = 'o-broken'":                                           1,
		"SELECT count(*) FROM demo.orders":                                                                       2,
		"SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'orders' AND event_id = 'evt-broken'":            1,
		"SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NOT NULL AND resolution = 'requeued'": 1,
		"SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL":                                 0,
	}
	for q, want := range counts {
		// evt-good-1 (another partition) applies in its own time.
		if n := s.db.AwaitCount(t, want, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
	b.do("back to the overview", chromedp.Click(css(`#nav a[data-page="overview"]`)))
	b.until("no dead letter on the overview", `(document.getElementById("ov-dead-letters")||{}).textContent === "0"`)

	// A conflict: both bodies side by side, the difference marked; resolve it.
	if code := s.post(t, "evt-c", "o-c", 100); code != http.StatusAccepted {
		t.Fatalf("evt-c: status %d", code)
	}
	if code := s.post(t, "evt-c", "o-c", 999); code != http.StatusConflict {
		t.Fatalf("evt-c with another body: status %d, want 409", code)
	}
	hookbridgetest.Eventually(t, time.Minute, "the conflict row", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM hookbridge.conflicts WHERE event_id = 'evt-c'") == 1
	})
	b.until("the conflict on the overview", `(document.getElementById("ov-conflicts")||{}).textContent === "1"`)
	cf := s.id(t, "SELECT id FROM hookbridge.conflicts WHERE event_id = 'evt-c'")
	crow := fmt.Sprintf(`#cf-list tr[data-id="%d"]`, cf)
	b.do("open the conflicts", chromedp.Click(css(`#nav a[data-page="conflicts"]`)), chromedp.WaitVisible(css(crow)))
	b.do("open the conflict", chromedp.Click(css(crow+" a")), chromedp.WaitVisible(css("table.diff")))
	b.shot("conflict")
	if o := b.text("#cf-original"); !strings.Contains(o, `"amount_cents": 100`) {
		t.Errorf("original body shown as %q", o)
	}
	if r := b.text("#cf-rejected"); !strings.Contains(r, `"amount_cents": 999`) {
		t.Errorf("rejected body shown as %q", r)
	}
	left := b.text("table.diff tr.changed td.code.a mark")
	right := b.text("table.diff tr.changed td.code.b mark")
	if left != "100" || right != "999" {
		t.Errorf("marked difference %q | %q, want 100 | 999 (the rest of the line is the same)", left, right)
	}
	b.do("resolve the conflict", chromedp.SetValue(css("#cf-resolution"), "sender bug; the original stays"), chromedp.Click(css("#cf-resolve")))
	b.until("the conflict resolved", `(document.getElementById("cf-detail-status")||{textContent:""}).textContent.includes("resolved") && document.getElementById("cf-resolve") === null`)
	b.shot("conflict-resolved")
	if n := s.db.Count(t, "SELECT count(*) FROM hookbridge.conflicts WHERE id = $1 AND resolved_at IS NOT NULL AND resolution = 'sender bug; the original stays'", cf); n != 1 {
		t.Errorf("conflict %d not resolved with the text typed", cf)
	}
	// The first evt-c applies in its own time; the conflict is the ingress's.
	if n := s.db.AwaitCount(t, 1, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-c' AND amount_cents = 100"); n != 1 {
		t.Errorf("the conflicting body changed the order")
	}

	// Replay: the database lost o-1 (restored from an older backup, say);
	// a dry run shows what a replay from seq 1 re-delivers, applying it
	// brings o-1 back and changes nothing else.
	if _, err := s.db.Pool.Exec(context.Background(), "DELETE FROM demo.orders WHERE order_id = 'o-1'"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Pool.Exec(context.Background(), "DELETE FROM hookbridge.inbox WHERE consumer = 'orders' AND event_id = 'evt-good-1'"); err != nil {
		t.Fatal(err)
	}
	msgs := s.js.StreamMsgs(t, stream.Hooks) // evt-good-1, evt-broken, evt-c
	if msgs != 3 {
		t.Fatalf("HOOKS holds %d messages, want 3", msgs)
	}
	inboxBefore := s.db.Count(t, "SELECT count(*) FROM hookbridge.inbox")
	b.do("open replay", chromedp.Click(css(`#nav a[data-page="replay"]`)))
	b.until("the consumer list", `[...document.querySelectorAll("#rp-consumer option")].some(o => o.value === "orders")`)
	b.do("dry run", chromedp.SetValue(css("#rp-consumer"), "orders"), chromedp.SetValue(css("#rp-from"), "1"), chromedp.Click(css("#rp-dry")))
	b.until("the dry run's summary", `document.getElementById("rp-count") !== null && !document.getElementById("rp-apply-box").hidden`)
	b.shot("replay-dry-run")
	if got := b.text("#rp-count"); got != strconv.FormatUint(msgs, 10) {
		t.Fatalf("dry run counts %q messages, want %d", got, msgs)
	}
	if got := b.text("#rp-outcomes"); !strings.Contains(got, "1 new") || !strings.Contains(got, "2 duplicate") {
		t.Errorf("dry run outcomes %q, want 1 new (the lost o-1) and 2 duplicates", got)
	}
	if b.eval(`[...document.querySelectorAll("#rp-consumer option")].some(o => o.value !== "orders")`) {
		t.Error("replay offers a consumer other than the configured orders")
	}
	if n := s.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-1'"); n != 0 {
		t.Fatal("the dry run applied something")
	}
	b.do("apply the replay", chromedp.Click(css("#rp-apply")))
	b.until("the replay to end", `["done", "failed"].includes(document.getElementById("rp-progress-text").dataset.state)`)
	b.shot("replay-done")
	if !b.eval(`getComputedStyle(document.getElementById("rp-apply-box")).display === "none"`) {
		t.Error("Apply is still offered after the replay started")
	}
	want := fmt.Sprintf("Done: %d of %d re-delivered.", msgs, msgs)
	if got := b.text("#rp-progress-text"); got != want {
		t.Fatalf("replay progress %q, want %q", got, want)
	}
	if got := b.eval(fmt.Sprintf(`document.getElementById("rp-bar").value === %d && document.getElementById("rp-bar").max === %d`, msgs, msgs)); !got {
		t.Error("the progress bar is not full")
	}
	counts = map[string]int{
		"SELECT count(*) FROM demo.orders WHERE order_id = 'o-1' AND amount_cents = 100": 1, // back, once
		"SELECT count(*) FROM demo.orders":                                               3,
		"SELECT count(*) FROM hookbridge.inbox":                                          inboxBefore + 1,
		"SELECT count(*) FROM hookbridge.conflicts":                                      1, // the replayed evt-c is the stored body: a duplicate
		"SELECT count(*) FROM hookbridge.dead_letters":                                   1,
	}
	for q, want := range counts {
		if n := s.db.Count(t, q); n != want {
			t.Errorf("after the replay: %s = %d, want %d", q, n, want)
		}
	}

	// The life of the requeued event.
	b.do("look up evt-broken", chromedp.Click(css(`#nav a[data-page="events"]`)),
		chromedp.SetValue(css("#ev-source"), "demo"), chromedp.SetValue(css("#ev-id"), "evt-broken"), chromedp.Click(css("#ev-lookup")))
	b.until("the event's consumers", `document.querySelector('#ev-result tr[data-consumer="orders"]') !== null`)
	b.shot("event-life")
	if st := b.eval(`["processed", "duplicate"].includes(document.querySelector('#ev-result tr[data-consumer="orders"]').dataset.state)`); !st {
		t.Errorf("evt-broken's outcome for orders shown as %q, want processed", b.text(`#ev-result tr[data-consumer="orders"]`))
	}
	// Its dead letter is part of its life, resolved as it is.
	dlRow := fmt.Sprintf(`#ev-result tr[data-dead-letter="%d"]`, dl)
	if got := b.text(dlRow); !strings.Contains(got, "requeued") {
		t.Errorf("evt-broken's life shows its dead letter as %q, want it resolved (requeued)", got)
	}
	if !b.eval(fmt.Sprintf(`document.querySelector(%q).getAttribute("href") === "#/dead-letters/%d"`, dlRow+" a", dl)) {
		t.Error("evt-broken's life does not link its dead letter")
	}
	// And the conflicting event's life links its (resolved) conflict.
	b.do("look up evt-c", chromedp.SetValue(css("#ev-id"), "evt-c"), chromedp.Click(css("#ev-lookup")))
	cfRow := fmt.Sprintf(`#ev-result tr[data-conflict="%d"]`, cf)
	b.until("the event's conflict", fmt.Sprintf(`document.querySelector(%q) !== null`, cfRow))
	if got := b.text(cfRow); !strings.Contains(got, "sender bug") {
		t.Errorf("evt-c's life shows its conflict as %q, want it resolved", got)
	}

	// A phone: nothing scrolls sideways.
	b.do("phone size", chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"#/overview"))
	b.until("the overview on a phone", `document.getElementById("ov-ready") !== null`)
	b.shot("phone-overview")
	if !b.eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("the overview scrolls sideways on a 390 px wide screen")
	}
	b.do("phone conflict", chromedp.Navigate(base+fmt.Sprintf("#/conflicts/%d", cf)), chromedp.WaitVisible(css("table.diff")))
	b.shot("phone-conflict")
	if !b.eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("the conflict page scrolls sideways on a 390 px wide screen")
	}

	if ex := b.pageExceptions(); len(ex) > 0 {
		t.Errorf("the page threw: %v", ex)
	}
}

// TestConsoleShowsRetryingEvents: an event its handler postpones is named
// on the overview as postponed (not as failing), with when it was first
// postponed and its last error, and its life shows them; once it applies
// it leaves the list. Each stream shows
// how far back a replay reaches: its oldest stored message.
func TestConsoleShowsRetryingEvents(t *testing.T) {
	chrome := chromiumPath(t)
	s := startConsoleServe(t, builtin.Handlers())
	b := newBrowser(t, chrome)
	base := "http://" + s.adminAddr + "/"
	b.login(base)

	// Paid before it was created: the orders handler postpones it until
	// its order.created.
	if code := s.postBody(t, "evt-early", orders.WebhookBody(orders.Paid, "o-late", 100)); code != http.StatusAccepted {
		t.Fatalf("evt-early: status %d", code)
	}
	// A postponed event is not failing: it is listed as postponed, with
	// the time its handler first postponed it, and not as retrying.
	row := `#ov-postponed tr[data-event="evt-early"]`
	b.until("the postponed event on the overview", fmt.Sprintf(`document.querySelector(%q) !== null`, row))
	b.shot("overview-postponed")
	if got := b.text(row + ` td[data-label="Postponed since"]`); got == "" || got == "—" {
		t.Errorf("postponed since shown as %q", got)
	}
	if got := b.text(row + ` td[data-label="Last error"]`); !strings.Contains(got, "unknown order") {
		t.Errorf("last error shown as %q", got)
	}
	if got := b.textWhen(`#ov-consumers tr[data-consumer="orders"] td[data-label="Postponed"]`, is("1")); got != "1" {
		t.Errorf("orders postponed shown as %q, want 1", got)
	}
	if got := b.text(`#ov-consumers tr[data-consumer="orders"] td[data-label="Retrying"]`); got != "0" {
		t.Errorf("orders retrying shown as %q, want 0: a postponed event is not failing", got)
	}
	if b.eval(`document.querySelector('#ov-retrying tr[data-event="evt-early"]') !== null`) {
		t.Error("the postponed event is listed as retrying")
	}
	reach := func(s string) bool { return strings.HasPrefix(s, "seq 1, ") && strings.Contains(s, "ago") }
	if got := b.textWhen(`#ov-streams tr[data-stream="HOOKS"] td[data-label="Replay reaches back to"]`, reach); !reach(got) {
		t.Errorf("HOOKS replay reach shown as %q, want its first message's sequence and time", got)
	}

	b.do("open its life", chromedp.Click(css(row+" a")))
	b.until("the event's consumer", `document.querySelector('#ev-result tr[data-consumer="orders"]') !== null`)
	b.shot("event-retrying")
	cons := `#ev-result tr[data-consumer="orders"]`
	if got := b.text(cons); !strings.Contains(got, "postponed") || !strings.Contains(got, "unknown order") {
		t.Errorf("the event's consumer row shows %q, want postponed with the last error", got)
	}
	if got := b.text(cons + ` td[data-label="Postponed since"]`); got == "" || got == "—" {
		t.Errorf("the event's postponement shown as %q", got)
	}

	// Its order.created comes: it applies, the payment right after it,
	// and the payment leaves the list.
	if code := s.postBody(t, "evt-created", orders.WebhookBody(orders.Created, "o-late", 100)); code != http.StatusAccepted {
		t.Fatalf("evt-created: status %d", code)
	}
	hookbridgetest.Eventually(t, 2*time.Minute, "the postponed event applied", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-late' AND status = 'paid' AND version = 2") == 1
	})
	b.do("back to the overview", chromedp.Click(css(`#nav a[data-page="overview"]`)))
	b.until("no event postponed", `document.querySelector("#ov-postponed .empty") !== null && document.querySelector("#ov-retrying .empty") !== null`)
	if ex := b.pageExceptions(); len(ex) > 0 {
		t.Errorf("the page threw: %v", ex)
	}
}

// TestConsoleActionsInBrowser covers the console's other actions in
// headless Chromium against a real serve: discard a dead letter with a
// reason (kept, marked, nothing applied) and find it again with the
// resolved filter; requeue a dead outbox row (the relay then publishes
// it to EVENTS); pause a consumer (an event sent meanwhile stays
// unapplied) and resume it (the event applies); delete an orphaned
// durable.
func TestConsoleActionsInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	var fixed atomic.Bool // never set: the broken order stays broken
	s := startConsoleServe(t, fixableOrders(&fixed))
	b := newBrowser(t, chrome)
	base := "http://" + s.adminAddr + "/"
	b.login(base)
	ctx := context.Background()

	// Discard.
	if code := s.post(t, "evt-junk", brokenOrder, 1); code != http.StatusAccepted {
		t.Fatalf("evt-junk: status %d", code)
	}
	b.until("the dead letter on the overview", `document.getElementById("ov-dead-letters").textContent === "1"`)
	dl := s.id(t, "SELECT id FROM hookbridge.dead_letters WHERE event_id = 'evt-junk'")
	b.do("open the dead letter", chromedp.Navigate(base+fmt.Sprintf("#/dead-letters/%d", dl)), chromedp.WaitVisible(css("#dl-discard-form")))
	const reason = "a test event from the sender's sandbox"
	b.do("discard it", chromedp.SetValue(css("#dl-discard-reason"), reason), chromedp.Click(css("#dl-discard")))
	b.until("the dead letter discarded", `(document.getElementById("dl-detail-status")||{textContent:""}).textContent.includes("discarded")`)
	b.shot("dead-letter-discarded")
	if n := s.db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolved_at IS NOT NULL AND resolution = 'discarded' AND resolution_note = $2", dl, reason); n != 1 {
		t.Errorf("dead letter %d is not kept marked discarded with the reason typed", dl)
	}
	if n := s.db.Count(t, "SELECT count(*) FROM demo.orders"); n != 0 {
		t.Errorf("orders = %d after a discard, want 0", n)
	}
	row := fmt.Sprintf(`#dl-list tr[data-id="%d"]`, dl)
	b.do("the unresolved list", chromedp.Click(css(`#nav a[data-page="dead-letters"]`)))
	b.until("an empty unresolved list", `document.querySelector("#dl-list .empty") !== null`)
	b.do("show the resolved ones", chromedp.SetValue(css("#dl-resolved"), "true"), chromedp.Click(css("#dl-apply")), chromedp.WaitVisible(css(row)))
	b.shot("dead-letters-resolved")

	// Outbox: a row the relay gave up on (put there as the relay would
	// leave it); requeued, the relay publishes it.
	var ob int64
	if err := s.db.Pool.QueryRow(ctx, `INSERT INTO hookbridge.outbox (event_id, subject, payload, status, attempts, last_error)
		VALUES ('out-dead-1', 'events.orders.created', '{"order_id":"o-x"}', 'dead', 20, 'nats: no responders available')
		RETURNING id`).Scan(&ob); err != nil {
		t.Fatal(err)
	}
	eventsBefore := s.js.StreamMsgs(t, stream.Events)
	orow := fmt.Sprintf(`#ob-list tr[data-id="%d"]`, ob)
	b.do("open the outbox", chromedp.Click(css(`#nav a[data-page="outbox"]`)), chromedp.WaitVisible(css(orow)))
	b.shot("outbox-dead")
	b.do("requeue the row", chromedp.Click(css(orow+" button")))
	b.until("the row requeued", fmt.Sprintf(`document.querySelector(%q).textContent === "Requeued"`, orow+" button"))
	hookbridgetest.Eventually(t, time.Minute, "the relay publishes the requeued row", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM hookbridge.outbox WHERE id = $1 AND status = 'sent'", ob) == 1
	})
	if n := s.js.StreamMsgs(t, stream.Events); n != eventsBefore+1 {
		t.Errorf("EVENTS holds %d messages, want %d", n, eventsBefore+1)
	}

	// Pause and resume.
	crow := `#ov-consumers tr[data-consumer="orders"]`
	b.do("the overview", chromedp.Click(css(`#nav a[data-page="overview"]`)), chromedp.WaitVisible(css(crow+" button")))
	b.do("pause orders", chromedp.Click(css(crow+" button")))
	b.until("orders paused", fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent.includes("paused")`, crow))
	b.until("the pause reported", `document.getElementById("flash").textContent === "Consumer orders paused."`)
	b.shot("consumer-paused")
	c, err := s.js.JS.Consumer(ctx, stream.Hooks, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || !info.Paused {
		t.Fatalf("JetStream consumer orders paused = %v (%v), want true", info != nil && info.Paused, err)
	}
	if code := s.post(t, "evt-paused", "o-p", 5); code != http.StatusAccepted {
		t.Fatalf("evt-paused: status %d", code)
	}
	b.until("the paused consumer's backlog", fmt.Sprintf(`document.querySelector(%q).textContent.includes("paused") && document.querySelector(%q).textContent === "1"`,
		crow, crow+` td[data-label="Pending"]`))
	if n := s.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-p'"); n != 0 {
		t.Fatal("a paused consumer applied an event")
	}
	b.do("resume orders", chromedp.Click(css(crow+" button")))
	b.until("orders running", fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent.includes("running")`, crow))
	b.until("the resume reported", `document.getElementById("flash").textContent === "Consumer orders resumed."`)
	hookbridgetest.Eventually(t, time.Minute, "the event applied after resume", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-p'") == 1
	})
	b.shot("consumer-resumed")

	// An orphaned durable (a consumer taken out of the configuration) is
	// marked, with a card; Delete asks once more, then removes it.
	if _, err := s.js.JS.CreateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: "old_orders", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	orow = `#ov-consumers tr[data-consumer="old_orders"]`
	b.until("the orphan on the overview", fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent.includes("orphaned") && document.getElementById("ov-orphans") !== null`, orow))
	b.shot("orphaned-durable")
	b.do("delete it", chromedp.Click(css(orow+" button")))
	b.until("the delete armed", fmt.Sprintf(`document.querySelector(%q).textContent === "Confirm delete"`, orow+" button"))
	if _, err := s.js.JS.Consumer(ctx, stream.Hooks, "old_orders"); err != nil {
		t.Fatalf("one click deleted old_orders: %v", err)
	}
	b.do("confirm", chromedp.Click(css(orow+" button")))
	b.until("the delete reported", `document.getElementById("flash").textContent.startsWith("Durable old_orders deleted")`)
	b.until("the orphan gone", fmt.Sprintf(`document.querySelector(%q) === null && document.getElementById("ov-orphans") === null`, orow))
	if _, err := s.js.JS.Consumer(ctx, stream.Hooks, "old_orders"); err == nil {
		t.Fatal("old_orders still on HOOKS after the delete")
	}

	// A token that stops working (rotated on the server) sends the
	// operator back to the login form with the reason, and is forgotten.
	b.do("rotate the token under the page", chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("hookbridge.admin_token", "rotated-away")`),
		chromedp.Click(css(`#nav a[data-page="dead-letters"]`)))
	b.until("the login form", `!document.getElementById("page-login").hidden && document.getElementById("login-error").textContent.includes("refused")`)
	b.shot("token-refused")
	if !b.eval(`sessionStorage.getItem("hookbridge.admin_token") === null`) {
		t.Error("a refused token is still kept")
	}
	if ex := b.pageExceptions(); len(ex) > 0 {
		t.Errorf("the page threw: %v", ex)
	}
}
