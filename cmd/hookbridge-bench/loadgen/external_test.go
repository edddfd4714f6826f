package loadgen_test

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/cmd/hookbridge-bench/loadgen"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// build builds the command pkg for the modes that run serve (the product
// binary) and nats-server (the load tool) as processes of their own.
func build(t *testing.T, pkg string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", exe, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return exe
}

// TestExternalModesSmall runs one small round of the external
// measurement (serve and nats-server in processes of their own, the floor
// on its own nats-server, raw commits) and a short soak.
func TestExternalModesSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	t.Parallel()
	exe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge")
	natsExe := build(t, "github.com/hookbridge/hookbridge/cmd/hookbridge-bench")
	c := ctx(t)
	res, err := loadgen.RunExternal(c, loadgen.ExternalOptions{Exe: exe, NATSExe: natsExe, AdminURL: hookbridgetest.AdminURL(), Rounds: 1, Concurrency: 4, Total: 300, PGTotal: 100})
	if err != nil {
		t.Fatal(err)
	}
	requireSuiteOutput(t, res, "floor HTTP→publish (own nats-server)", "hookbridge CPU per event", "postgres CPU per event",
		"hookbridge CPU per ingress request", "e2e p99 @ 50% of max", "applied (first send → last applied) / postgres single-row commits",
		"postgres CPU per event, its writes alone", "applied ceiling (floor ingress + postgres writes alone) / postgres single-row commits")

	soak, err := loadgen.Soak(c, loadgen.SoakOptions{Exe: exe, NATSExe: natsExe, AdminURL: hookbridgetest.AdminURL(), Duration: 4 * time.Second, Rate: 100, Concurrency: 4, Sample: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(soak.Samples) < 6 || soak.Samples[0].ServeRSSKB <= 0 || soak.Samples[0].NATSRSSKB <= 0 || soak.Load.Accepted != 400 {
		t.Fatalf("soak: %d samples, first %+v, accepted %d", len(soak.Samples), soak.Samples[0], soak.Load.Accepted)
	}
}
