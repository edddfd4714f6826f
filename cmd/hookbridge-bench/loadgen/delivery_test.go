package loadgen_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/cmd/hookbridge-bench/loadgen"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestDeliveryOrderAndOutage runs a small delivery run: two serve
// processes (relay and delivery) with two ordered endpoints, the last one
// SIGKILLed at 40 % of the deliveries; then one instance whose receiver
// is down for 3 s under load. The receiver's counts: every event received,
// none out of its key's order, every outage event delivered once the
// receiver is back and no dead letter.
func TestDeliveryOrderAndOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs processes")
	}
	t.Parallel()
	exe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge")
	natsExe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge-bench")
	// The killed instance's endpoints move when its lease runs out: the
	// endpoint timeout (2 s) plus 10 s; the rest is generous for a busy
	// machine.
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const keys, versions, endpoints = 8, 10, 2
	var progress strings.Builder
	res, err := loadgen.Delivery(c, loadgen.DeliveryOptions{
		Exe: exe, NATSExe: natsExe, AdminURL: hookbridgetest.AdminURL(),
		Scenarios: []string{loadgen.DeliveryOrder, loadgen.DeliveryOutage},
		Timeout:   2 * time.Second, Rate: 40, Instances: 2, OrderedEndpoints: endpoints, Keys: keys, Versions: versions, KillAt: 0.4,
		// Attempts a second apart for longer than the outage: a
		// dead letter would mean an event's schedule ended early.
		Retry:  []time.Duration{0, time.Second, time.Second, time.Second, time.Second, time.Second, time.Second, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second},
		Outage: 3 * time.Second, Settle: time.Minute, Progress: &progress,
	})
	var out strings.Builder
	if res != nil {
		res.Print(&out)
	}
	if err != nil {
		t.Fatalf("%v\n%s\nprogress:\n%s", err, out.String(), progress.String())
	}
	o := res.Order
	if !res.OK || o == nil || o.Expected != keys*versions*endpoints || o.Received != o.Expected || o.OutOfOrder != 0 ||
		o.KilledAt <= 0 || o.KilledAt >= o.Expected {
		t.Fatalf("order:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	u := res.Outage
	if u == nil || u.Events <= 0 || u.Received != u.Events || u.DeadLetters != 0 || u.DuringOutage == 0 {
		t.Fatalf("outage:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	if len(res.Logs) != 0 {
		t.Errorf("logs kept in %v after a passing run", res.Logs)
	}
	t.Logf("report:\n%s", out.String())
}

// TestDeliveryIsolationCounts runs a small isolation scenario and checks
// what it measured, not how fast: the samples are the measured events of
// the healthy endpoints only (the warm-up round's are not among them, nor
// the bad endpoints'), and both bad endpoints were tried. The ratio
// promise is set out of reach: timings on a shared machine are not a
// test's to assert.
func TestDeliveryIsolationCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs processes")
	}
	t.Parallel()
	exe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge")
	natsExe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge-bench")
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const endpoints, perEndpoint = 5, 4
	var progress strings.Builder
	res, err := loadgen.Delivery(c, loadgen.DeliveryOptions{
		Exe: exe, NATSExe: natsExe, AdminURL: hookbridgetest.AdminURL(),
		Scenarios: []string{loadgen.DeliveryIsolation},
		Timeout:   2 * time.Second, Rate: 40, Endpoints: endpoints, PerEndpoint: perEndpoint,
		SlowFor: 500 * time.Millisecond, MaxP99Ratio: 1e6,
		Retry:  []time.Duration{0, time.Second, time.Minute},
		Settle: time.Minute, Progress: &progress,
	})
	var out strings.Builder
	if res != nil {
		res.Print(&out)
	}
	if err != nil {
		t.Fatalf("%v\n%s\nprogress:\n%s", err, out.String(), progress.String())
	}
	i := res.Isolation
	if i == nil || i.Baseline.N != endpoints*perEndpoint || i.WithBad.N != (endpoints-2)*perEndpoint ||
		i.Answered503 == 0 || i.SlowAnswered == 0 {
		t.Fatalf("isolation:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	if !strings.Contains(progress.String(), "warmed up") {
		t.Fatalf("no warm-up round:\n%s", progress.String())
	}
	t.Logf("report:\n%s", out.String())
}
