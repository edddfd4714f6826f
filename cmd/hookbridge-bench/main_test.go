package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/hookbridge/hookbridge/internal/engine"
)

// The help states the consumer defaults serve uses (it said the default
// batch was 1 when it was 256).
func TestHelpStatesTheConsumerDefaults(t *testing.T) {
	var c command
	var out bytes.Buffer
	parser, err := newParser(&c, kong.Writers(&out, &out), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = parser.Parse([]string{"--help"}) // help exits through the no-op
	help := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{
		fmt.Sprintf("In-process consumer batch size (0: hookbridge's default, %d)", engine.DefaultBatchSize),
		fmt.Sprintf("In-process consumer concurrency (0: hookbridge's default, %d)", engine.DefaultConcurrency),
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

// The load's flags reach the soak as they reach the external rounds
// (--paid-first was dropped on the way to the soak).
func TestSoakCarriesTheLoadFlags(t *testing.T) {
	var c command
	parser, err := newParser(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"--mode", "external", "--soak", "1m", "--rate", "500", "--paid-every", "5", "--paid-first"}); err != nil {
		t.Fatal(err)
	}
	soak, rounds := c.soakOptions("hb", "nats", "", nil), c.externalOptions("hb", "nats", "", nil)
	if !soak.PaidFirst || soak.PaidEvery != 5 || soak.Rate != 500 || soak.Duration != time.Minute {
		t.Fatalf("soak options %+v, want paid-first with paid-every 5 at 500/s for 1m", soak)
	}
	if soak.PaidFirst != rounds.PaidFirst || soak.PaidEvery != rounds.PaidEvery || soak.Concurrency != rounds.Concurrency {
		t.Fatalf("the soak (%+v) and the rounds (%+v) read the load's flags differently", soak, rounds)
	}
}
