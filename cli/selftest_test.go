package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/selftest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

const selftestSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// selftestDeployment is a serve started by the test with the self-test
// enabled, against a database and a NATS server of its own, and the
// configuration file both serve and the command read.
type selftestDeployment struct {
	db     *hookbridgetest.Database
	ns     *hookbridgetest.JetStream
	dir    string
	config string
	url    string
	stop   func() // stops serve; idempotent
}

// startSelftestDeployment writes the configuration, loads it as serve
// does and runs serve with handlers until the test ends.
func startSelftestDeployment(t *testing.T, handlers app.Handlers) *selftestDeployment {
	t.Helper()
	d := &selftestDeployment{db: hookbridgetest.Postgres(t), ns: hookbridgetest.NATS(t), dir: t.TempDir()}
	d.start(t, handlers, true)
	return d
}

// start writes the configuration (with the self-test enabled or not) and
// runs serve on it until stop or the end of the test.
func (d *selftestDeployment) start(t *testing.T, handlers app.Handlers, selftestEnabled bool) {
	t.Helper()
	d.config = filepath.Join(d.dir, "hookbridge.yaml")
	yaml := fmt.Sprintf("database_url: %q\nnats_url: %q\ndata_dir: %q\nhttp_addr: 127.0.0.1:0\nselftest:\n  enabled: %t\n  secrets: [%q]\n",
		d.db.URL, d.ns.URL(), d.dir, selftestEnabled, selftestSecret)
	if err := os.WriteFile(d.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := app.Load(d.config, noEnv, app.Overrides{}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := app.NewServer(cfg, handlers, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		d.url = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("serve did not start: %v", err)
	}
	stopped := false
	d.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(d.stop)
	// Ready once migrated and every consumer has its durable.
	hookbridgetest.Eventually(t, time.Minute, "serve ready", func() bool {
		resp, err := http.Get(d.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// selftestCommand runs `hookbridge selftest` as Main does and returns its
// exit code, stdout and stderr.
func (d *selftestDeployment) selftestCommand(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	rt := &runtime{handlers: builtin.Handlers(), stdout: &stdout, stderr: &stderr, env: noEnv}
	argv := append([]string{"selftest", "--config", d.config, "--url", d.url}, args...)
	code := run(context.Background(), argv, rt, func(code int) { t.Fatalf("command line exited with %d: %s", code, stderr.String()) })
	return code, stdout.String(), stderr.String()
}

type selftestJSON struct {
	selftest.Report
	Cleaned *selftest.Purged `json:"cleaned"`
}

func decodeSelftest(t *testing.T, out string) selftestJSON {
	t.Helper()
	var r selftestJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("selftest --json output: %v\n%s", err, out)
	}
	return r
}

// The command runs the eight checks in order against a serve started by
// the test and exits 0; every check's counters are the protocol's. A run
// with --cleanup leaves nothing of itself, and the first run's rows stay
// under its run id until removed by id.
func TestSelftestCommandPassesAgainstServe(t *testing.T) {
	t.Parallel()
	d := startSelftestDeployment(t, builtin.Handlers())

	code, out, errOut := d.selftestCommand(t, "--json")
	if code != 0 {
		t.Fatalf("selftest exit code %d, want 0\n%s\n%s", code, out, errOut)
	}
	r := decodeSelftest(t, out)
	// The dead letter and the conflict the run makes on purpose are kept
	// under its run id, resolved: not among the operator's unresolved ones.
	if r.Resolved != (selftest.Resolved{DeadLetters: 1, Conflicts: 1}) {
		t.Errorf("the run resolved %+v, want its one dead letter and one conflict", r.Resolved)
	}
	for q, n := range map[string]int{
		"SELECT count(*) FROM hookbridge.dead_letters WHERE consumer = 'hookbridge_selftest'":                                  1,
		"SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL":                                               0,
		"SELECT count(*) FROM hookbridge.conflicts WHERE source = 'hookbridge_selftest'":                                       1,
		"SELECT count(*) FROM hookbridge.conflicts WHERE resolved_at IS NULL":                                                  0,
		"SELECT count(*) FROM hookbridge.dead_letters WHERE resolution = 'selftest' AND resolution_note LIKE '%' || $1 || '%'": 1,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, r.RunID)
		}
		if got := d.db.Count(t, q, args...); got != n {
			t.Errorf("after a run: %s = %d, want %d", q, got, n)
		}
	}
	want := []struct {
		name string
		c    selftest.Counters // inbox, effects, conflicts, dead letters
	}{
		{selftest.CheckFirst, selftest.Counters{Inbox: 1, Effects: 1}},
		{selftest.CheckRepeat, selftest.Counters{Inbox: 1, Effects: 1}},
		{selftest.CheckConflict, selftest.Counters{Inbox: 1, Effects: 1, Conflicts: 1}},
		{selftest.CheckFailure, selftest.Counters{Inbox: 2, Effects: 2, Conflicts: 1}},
		{selftest.CheckParallel, selftest.Counters{Inbox: 3, Effects: 3, Conflicts: 1}},
		{selftest.CheckBetween, selftest.Counters{Inbox: 3, Effects: 3, Conflicts: 1, DeadLetters: 1}},
		{selftest.CheckRelayed, selftest.Counters{Inbox: 3, Effects: 3, Conflicts: 1, DeadLetters: 1, Sent: 3, Relayed: 3}},
		{selftest.CheckDuplicate, selftest.Counters{Inbox: 3, Effects: 3, Conflicts: 1, DeadLetters: 1, Sent: 3, Relayed: 3}},
	}
	if !r.OK || len(r.Checks) != len(want) {
		t.Fatalf("report ok=%t with %d checks, want ok with %d:\n%s", r.OK, len(r.Checks), len(want), out)
	}
	for i, w := range want {
		c := r.Checks[i]
		got := c.Counters
		got.Pending, got.Sent, got.Relayed = 0, got.Sent*boolInt(i >= 6), got.Relayed*boolInt(i >= 6) // the relay runs when it runs until check 7
		if c.N != i+1 || c.Name != w.name || !c.OK || got != w.c {
			t.Errorf("check %d: %+v, want %s ok with %+v", i+1, c, w.name, w.c)
		}
	}
	if got := strings.Join(r.Checks[4].Answers, ","); got != "200,202" {
		t.Errorf("parallel deliveries answered %s, want 200,202", got)
	}
	// What the counters say, the tables hold.
	if n := d.db.Count(t, "SELECT count(*) FROM hookbridge_selftest.effects WHERE run_id = $1", r.RunID); n != 3 {
		t.Fatalf("effects of run %s = %d, want 3", r.RunID, n)
	}
	if n := d.db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE consumer = $1", selftest.Consumer); n != 3 {
		t.Fatalf("self-test inbox rows = %d, want 3", n)
	}

	// The text report, with --cleanup: the second run removes its own rows.
	code, out, errOut = d.selftestCommand(t, "--cleanup")
	if code != 0 {
		t.Fatalf("selftest --cleanup exit code %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("selftest --cleanup:\n%s", out)
	// Serve runs the self-test and pulls from its durable: --cleanup keeps it.
	for _, line := range []string{"1 first-delivery", "8 duplicate-publish", "all 8 checks hold", "removed run st",
		"resolved what the run made on purpose: 1 dead letter(s), 1 conflict(s)", "durable kept: a client pulls from hookbridge_selftest"} {
		if !strings.Contains(out, line) {
			t.Errorf("text report lacks %q:\n%s", line, out)
		}
	}
	if n := d.db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE consumer = $1", selftest.Consumer); n != 3 {
		t.Fatalf("self-test inbox rows after a run with --cleanup = %d, want the first run's 3", n)
	}
	if n := d.db.Count(t, "SELECT count(*) FROM hookbridge_selftest.effects"); n != 3 {
		t.Fatalf("effects after a run with --cleanup = %d, want the first run's 3", n)
	}

	code, out, errOut = d.selftestCommand(t, "--cleanup-only", "--run-id", r.RunID, "--json")
	if code != 0 {
		t.Fatalf("selftest --cleanup-only exit code %d\n%s\n%s", code, out, errOut)
	}
	for q, n := range map[string]int{
		"SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'hookbridge_selftest'":               0,
		"SELECT count(*) FROM hookbridge.outbox WHERE starts_with(event_id, 'hookbridge_selftest:')": 0,
		"SELECT count(*) FROM hookbridge.conflicts WHERE source = 'hookbridge_selftest'":             0,
		"SELECT count(*) FROM hookbridge.dead_letters WHERE consumer = 'hookbridge_selftest'":        0,
		"SELECT count(*) FROM hookbridge_selftest.effects":                                           0,
	} {
		if got := d.db.Count(t, q); got != n {
			t.Errorf("after cleanup: %s = %d, want %d", q, got, n)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A planted fault makes the command fail, naming the checks it breaks. A
// handler that writes its effect outside the inbox transaction keeps the
// effect of a rolled-back apply: the failure-before-commit check counts
// two effects and the error-between-writes check one that should be gone.
// A handler that applies twice fails every check that makes an effect.
func TestSelftestCommandFailsOnPlantedFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault      string
		fail, pass []string
	}{
		{selftest.FaultSkipInbox, []string{selftest.CheckFailure, selftest.CheckBetween}, []string{selftest.CheckFirst, selftest.CheckRepeat}},
		{selftest.FaultDoubleApply, []string{selftest.CheckFirst, selftest.CheckFailure, selftest.CheckParallel}, []string{selftest.CheckBetween, selftest.CheckDuplicate}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			handlers := builtin.Handlers()
			handlers[selftest.HandlerName] = app.SelftestHandler(tc.fault)
			d := startSelftestDeployment(t, handlers)

			code, out, errOut := d.selftestCommand(t, "--json", "--timeout", "3s")
			if code != 1 {
				t.Fatalf("selftest against a %s handler exited %d, want 1:\n%s", tc.fault, code, out)
			}
			if !strings.Contains(errOut, "checks failed") {
				t.Errorf("stderr %q does not say checks failed", errOut)
			}
			r := decodeSelftest(t, out)
			ok := map[string]bool{}
			for _, c := range r.Checks {
				ok[c.Name] = c.OK
			}
			for _, name := range tc.fail {
				if ok[name] {
					t.Errorf("check %s held against a %s handler", name, tc.fault)
				}
			}
			for _, name := range tc.pass {
				if !ok[name] {
					t.Errorf("check %s failed against a %s handler; it does not depend on the fault", name, tc.fault)
				}
			}
			if t.Failed() {
				t.Logf("%s", out)
			}
		})
	}
}

// Without selftest.enabled the command refuses at once, saying how to
// enable it.
func TestSelftestCommandNeedsItEnabled(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hookbridge.yaml")
	if err := os.WriteFile(path, []byte("nats_url: nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &selftestDeployment{config: path, url: "http://127.0.0.1:1"}
	code, _, errOut := d.selftestCommand(t)
	if code != 1 || !strings.Contains(errOut, "selftest: {enabled: true") {
		t.Fatalf("exit %d, stderr %q; want 1 and how to enable it", code, errOut)
	}
}

// Once serve runs without the self-test, its durable would keep every
// self-test message it has not acked in HOOKS for good. Serve removes it
// (and the self-test's messages, so that a durable made later does not
// apply cleaned-up runs again), while a configured consumer's durables,
// partition durables included, stay; an orphan of another name is shown
// by the metric and left to the operator.
func TestServeWithoutTheSelftestRemovesItsDurable(t *testing.T) {
	t.Parallel()
	d := startSelftestDeployment(t, builtin.Handlers())
	if code, out, errOut := d.selftestCommand(t); code != 0 {
		t.Fatalf("selftest exit code %d\n%s\n%s", code, out, errOut)
	}
	ctx := context.Background()
	// A partition durable serve does not make (beyond the configured
	// partitions) still belongs to orders.
	for _, name := range []string{stream.PartitionDurable("orders", 99), "gone"} {
		if _, err := d.ns.JS.CreateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	d.stop()
	if _, err := d.ns.JS.Consumer(ctx, stream.Hooks, selftest.Consumer); err != nil {
		t.Fatalf("the self-test's durable after the run: %v", err)
	}

	d.start(t, builtin.Handlers(), false)
	hookbridgetest.Eventually(t, time.Minute, "the self-test's durable removed", func() bool {
		_, err := d.ns.JS.Consumer(ctx, stream.Hooks, selftest.Consumer)
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	})
	s, err := d.ns.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("hooks.hookbridge_selftest.>"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 0 {
		t.Fatalf("self-test messages left in HOOKS: %v", info.State.Subjects)
	}
	for _, name := range []string{"orders", stream.PartitionDurable("orders", 99), "gone"} {
		if _, err := d.ns.JS.Consumer(ctx, stream.Hooks, name); err != nil {
			t.Errorf("durable %s: %v, want it kept", name, err)
		}
	}
	hookbridgetest.Eventually(t, time.Minute, "the orphan in the metrics", func() bool {
		m := scrape(t, d.url+"/metrics")
		return strings.Contains(m, `hookbridge_stream_hooks_orphaned_durables{durable="gone"} 1`) &&
			!strings.Contains(m, `durable="orders`) && !strings.Contains(m, `durable="hookbridge_selftest"`)
	})
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
