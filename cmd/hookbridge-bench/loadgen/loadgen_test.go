package loadgen_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge-bench/loadgen"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

func factory(t *testing.T) loadgen.EnvFactory {
	t.Helper()
	return loadgen.AppFactory(hookbridgetest.AdminURL(), app.Config{}, builtin.Handlers(), "error", io.Discard)
}

// startInstance makes an environment with settings and starts an instance
// with roles in it; both stop when the test ends.
func startInstance(t *testing.T, c context.Context, settings loadgen.ConsumerSettings, roles ...string) (loadgen.Env, *loadgen.Instance) {
	t.Helper()
	env, err := factory(t)(c, settings)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })
	inst, err := env.Start(c, roles)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Stop() })
	return env, inst
}

// requireSuiteOutput fails the test unless the run recorded no failures
// and its printed report holds every line in want.
func requireSuiteOutput(t *testing.T, res *loadgen.SuiteResult, want ...string) {
	t.Helper()
	if len(res.Failures) > 0 {
		t.Fatalf("failures: %v", res.Failures)
	}
	var out strings.Builder
	res.Print(&out)
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// TestInProcessRunPassesTheCountCheck runs 200 events through a fresh
// in-process hookbridge (batch 8) and expects every one applied once.
func TestInProcessRunPassesTheCountCheck(t *testing.T) {
	t.Parallel()
	res, err := loadgen.InProcess(ctx(t), factory(t), loadgen.ConsumerSettings{BatchSize: 8}, []string{"all"},
		loadgen.Options{Concurrency: 8, Total: 200, Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 200 || res.Failed != 0 {
		t.Fatalf("accepted %d, failed %d (%v), want 200 and 0", res.Accepted, res.Failed, res.Statuses)
	}
	if res.Check == nil || !res.Check.OK {
		t.Fatalf("count check: %s", res.Check)
	}
	if res.Check.Inbox != 200 || res.Check.Orders != 200 || res.Check.Outbox != 200 {
		t.Fatalf("counts %+v", res.Check)
	}
	if res.Applied != 200 || res.E2E == nil || res.E2E.N != 200 || res.E2E.P99Ms <= 0 {
		t.Fatalf("applied %d, e2e %+v: want 200 measured", res.Applied, res.E2E)
	}
	if res.Ingress.N != 200 || res.IngressRPS <= 0 {
		t.Fatalf("ingress %+v at %.0f req/s", res.Ingress, res.IngressRPS)
	}
	if res.RSS == nil || res.RSS.PeakKB <= 0 {
		t.Fatalf("rss %+v", res.RSS)
	}
	// Other tests write to the same server, so only a lower bound holds:
	// 200 inbox rows, orders and outbox rows cannot take less than 200 B
	// of WAL each.
	if res.WAL == nil || res.WAL.Bytes < 200*200 || res.WAL.BytesPerEvent < 200 || res.WAL.From == "" || res.WAL.To == "" {
		t.Fatalf("wal %+v", res.WAL)
	}
	var out strings.Builder
	res.Print(&out)
	if !strings.Contains(out.String(), "PASS") || !strings.Contains(out.String(), "B per event") {
		t.Fatalf("summary lacks the check:\n%s", out.String())
	}
}

// TestPaidEventsPassTheCountCheck mixes order.paid events of orders
// already created into the load: each changes its order once, and every
// event still has one inbox row and one outbox message.
func TestPaidEventsPassTheCountCheck(t *testing.T) {
	t.Parallel()
	res, err := loadgen.InProcess(ctx(t), factory(t), loadgen.ConsumerSettings{}, []string{"all"},
		loadgen.Options{Concurrency: 4, Total: 200, Rate: 400, PaidEvery: 4, Check: true})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Check
	if c == nil || !c.OK || c.Paid < 10 || c.Orders != 200-c.Paid || c.OrdersChanged != c.Paid || c.Outbox != 200 || c.Inbox != 200 {
		t.Fatalf("check = %+v", c)
	}
}

// TestCountCheckFailsWhenItShould runs against one environment, then
// breaks the exactly-once outcome in each way the check must notice.
func TestCountCheckFailsWhenItShould(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	env, inst := startInstance(t, c, loadgen.ConsumerSettings{BatchSize: 32}, "all")

	const runID = "check-run"
	res, err := loadgen.Load(c, loadgen.Options{URL: inst.URL, Secret: env.Secret(), DatabaseURL: env.DatabaseURL(),
		Concurrency: 4, Total: 50, RunID: runID, Check: true, Rate: 500})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Check.OK {
		t.Fatalf("the untouched run fails the check: %s", res.Check)
	}

	pool, err := pgxpool.New(c, env.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	verifyWith := func(expected, notAccepted int) *loadgen.Check {
		t.Helper()
		ch, err := loadgen.VerifyCounts(c, pool, "orders", "demo", runID, expected, notAccepted)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	mustFail := func(ch *loadgen.Check, problem string) {
		t.Helper()
		if ch.OK || !strings.Contains(strings.Join(ch.Problems, "; "), problem) {
			t.Fatalf("check = %s, want a failure mentioning %q", ch, problem)
		}
	}
	if ch := verifyWith(50, 0); !ch.OK {
		t.Fatalf("check = %s", ch)
	}
	// An event the ingress accepted but that never arrived.
	mustFail(verifyWith(51, 0), "inbox rows = 50, want 51")
	// A sender's event the ingress never took.
	mustFail(verifyWith(50, 1), "never accepted")

	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(c, sql); err != nil {
			t.Fatal(err)
		}
	}
	// An effect applied twice.
	exec(`UPDATE demo.orders SET version = 2 WHERE order_id = 'check-run-7'`)
	mustFail(verifyWith(50, 0), "changed more than once")
	exec(`UPDATE demo.orders SET version = 1 WHERE order_id = 'check-run-7'`)
	// An effect lost while the inbox says applied.
	exec(`DELETE FROM demo.orders WHERE order_id = 'check-run-3'`)
	mustFail(verifyWith(50, 0), "orders = 49, want 50")
	// An outgoing event lost.
	exec(`DELETE FROM hookbridge.outbox WHERE event_id = 'orders:demo:check-run-4'`)
	mustFail(verifyWith(50, 0), "outbox rows = 49, want 50")
}

// TestRejectedRunFailsTheCheck signs with the wrong secret: nothing is
// accepted, and the run's check says so.
func TestRejectedRunFailsTheCheck(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	env, inst := startInstance(t, c, loadgen.ConsumerSettings{}, "all")
	res, err := loadgen.Load(c, loadgen.Options{URL: inst.URL, Secret: "whsec_d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==",
		DatabaseURL: env.DatabaseURL(), Concurrency: 4, Total: 20, Check: true, ApplyIdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 20 || res.Statuses["401"] != 20 {
		t.Fatalf("failed %d, statuses %v; want 20 × 401", res.Failed, res.Statuses)
	}
	if res.Check == nil || res.Check.OK {
		t.Fatalf("check = %s, want a failure", res.Check)
	}
}

// TestDrainMeasuresAndChecks fills a stream through the ingress, then
// applies it with the consumer alone.
func TestDrainMeasuresAndChecks(t *testing.T) {
	t.Parallel()
	d, err := loadgen.Drain(ctx(t), factory(t), loadgen.ConsumerSettings{BatchSize: 16}, 300, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Check.OK || d.PerSecond <= 0 || d.Events <= 0 {
		t.Fatalf("drain = %s", d)
	}
}

// TestFloorAndRawMeasurements runs the floors small.
func TestFloorAndRawMeasurements(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	f, err := loadgen.StartFloor(c)
	if err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.Load(c, loadgen.Options{URL: f.URL, Secret: "whsec_c2VjcmV0", Concurrency: 4, Total: 100})
	if cerr := f.Close(); cerr != nil {
		t.Error(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 100 {
		t.Fatalf("floor accepted %d of 100 (%v)", res.Accepted, res.Statuses)
	}
	for _, run := range []func() (loadgen.Throughput, error){
		func() (loadgen.Throughput, error) { return loadgen.RawPublishSync(c, 200, 4) },
		func() (loadgen.Throughput, error) { return loadgen.RawPublishAsync(c, 200, 64) },
		func() (loadgen.Throughput, error) { return loadgen.RawInsert(c, hookbridgetest.AdminURL(), 100, 2) },
	} {
		tp, err := run()
		if err != nil {
			t.Fatal(err)
		}
		if tp.Errors != 0 || tp.PerSecond <= 0 {
			t.Fatalf("%s", tp)
		}
	}
}

// TestSuiteSmall runs every stage once with tiny sizes.
func TestSuiteSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every stage")
	}
	t.Parallel()
	res, err := loadgen.RunSuite(ctx(t), loadgen.SuiteOptions{
		Factory: factory(t), AdminURL: hookbridgetest.AdminURL(), Repeat: 1, Concurrency: 4,
		Total: 200, PGTotal: 100, DrainTotal: 200, E2ETotal: 200, Batches: []int{1, 8},
	})
	if err != nil {
		t.Fatal(err)
	}
	requireSuiteOutput(t, res, "floor HTTP→publish", "consumer drain batch=8", "e2e p99 @ 50% of max", "hookbridge ingress (verify on) / floor HTTP→publish")
}

func TestMedianAndPercentiles(t *testing.T) {
	if got := loadgen.Median([]float64{3, 1, 2}); got != 2 {
		t.Fatalf("median = %v", got)
	}
	if got := loadgen.Median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Fatalf("median = %v", got)
	}
	if got := loadgen.Median(nil); got != 0 {
		t.Fatalf("median = %v", got)
	}
}

// TestUnreachableServerAbortsTheRun: a server that does not answer ends
// the run with an error instead of holding it.
func TestUnreachableServerAbortsTheRun(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := loadgen.Load(ctx(t), loadgen.Options{URL: "http://127.0.0.1:1", Secret: "whsec_c2VjcmV0",
		Concurrency: 4, Total: 1000, MaxRetries: -1})
	if err == nil || !strings.Contains(err.Error(), "run aborted") {
		t.Fatalf("err = %v, want the run aborted", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("aborting took %s", d)
	}
}
