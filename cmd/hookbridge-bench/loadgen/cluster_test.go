package loadgen_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/cmd/hookbridge-bench/loadgen"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// TestClusterRunWithAKill runs two serve processes on one nats-server and
// one database, SIGKILLs one at 40 % of the events and starts it again at
// 60 %, while two accounts fail until a second after the first send, one
// order in five is paid before it is created and a replay runs at half:
// every event answered 2xx is applied once and in order, counted from the
// database.
func TestClusterRunWithAKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs processes")
	}
	t.Parallel()
	exe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge")
	natsExe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge-bench")
	const accounts, versions, orders = 30, 8, 20
	var progress strings.Builder
	res, err := loadgen.Cluster(ctx(t), loadgen.ClusterOptions{
		Exe: exe, NATSExe: natsExe, AdminURL: hookbridgetest.AdminURL(), Instances: 2,
		Accounts: accounts, Versions: versions, Orders: orders, Concurrency: 8,
		KillAt: 0.4, RestartAt: 0.6, FailKeys: 2, FailFor: time.Second, PaidFirst: true, Replay: true,
		// The killed member's unacked messages come back after ack_wait:
		// 5 s instead of 30 s keeps the test short; order does not depend
		// on it.
		AckWait: 5 * time.Second,
		// Generous: the run waits on the applies, and ends as soon as
		// every one is in.
		Settle:   time.Minute,
		Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out strings.Builder
	res.Print(&out)
	events := accounts*versions + 2*orders
	if !res.OK || res.Events != events || res.Sent != events || res.Answered2xx != events || res.NotAccepted != 0 ||
		res.Applied != events || res.AppliedTwice != 0 || res.OutOfOrder != 0 || res.StaleAccounts != 0 ||
		res.DeadLetters != 0 || res.OrdersNotPaid != 0 || res.AppliedPerSecond <= 0 || res.Requests < events {
		t.Fatalf("report:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	// The faults happened: the kill, the restart, the blocks lifted, the
	// replay ran to its summary.
	timeline := ""
	for _, s := range res.Timeline {
		timeline += s.What + "\n"
	}
	for _, w := range []string{"hb2 killed (SIGKILL)", "hb2 restarted", "blocks lifted", "replay ended"} {
		if !strings.Contains(timeline, w) {
			t.Errorf("timeline lacks %q:\n%s", w, out.String())
		}
	}
	if r := res.Replay; r == nil || r.Selected == 0 || r.Selected != r.Processed+r.Duplicate+r.Held+r.Failed {
		t.Errorf("replay: %+v", res.Replay)
	}
	if res.Logs != "" {
		t.Errorf("logs kept in %s after a passing run", res.Logs)
	}
	t.Logf("report:\n%s", out.String())
}

// TestClusterRunUnkeyedAfterABacklog restarts each instance in turn
// (SIGTERM) while the events arrive, takes the second half in with the
// ingress role only, and then starts every instance with both sources'
// ordering keys turned off: the backlog accepted under the keys is applied,
// once and in order.
func TestClusterRunUnkeyedAfterABacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs processes")
	}
	t.Parallel()
	exe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge")
	natsExe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge-bench")
	const accounts, versions, orders, concurrency = 30, 8, 20, 8
	var progress strings.Builder
	res, err := loadgen.Cluster(ctx(t), loadgen.ClusterOptions{
		Exe: exe, NATSExe: natsExe, AdminURL: hookbridgetest.AdminURL(), Instances: 2,
		Accounts: accounts, Versions: versions, Orders: orders, Concurrency: concurrency,
		Rolling: true, UnkeyAfter: true, PaidFirst: true, Settle: time.Minute, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out strings.Builder
	res.Print(&out)
	events := accounts*versions + 2*orders
	if !res.OK || res.Answered2xx != events || res.Applied != events || res.AppliedTwice != 0 || res.OutOfOrder != 0 ||
		res.StaleAccounts != 0 || res.DeadLetters != 0 || res.OrdersNotPaid != 0 {
		t.Fatalf("report:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	// The sending pauses once half the events were answered, until every
	// instance serves the ingress role only: what was applied before the
	// change is at most that half and the requests then in flight.
	if want := events - (events+1)/2 - (concurrency - 1); res.Backlog == nil || *res.Backlog < want {
		t.Fatalf("backlog at the change %v, want at least %d:\n%s", res.Backlog, want, out.String())
	}
	timeline := ""
	for _, s := range res.Timeline {
		timeline += s.What + "\n"
	}
	for _, w := range []string{"hb1 stopping (SIGTERM) for a rolling restart", "hb2 restarted with the ingress role only",
		"all instances started with all roles and ordering_key: none"} {
		if !strings.Contains(timeline, w) {
			t.Errorf("timeline lacks %q:\n%s", w, out.String())
		}
	}
	t.Logf("report:\n%s", out.String())
}
