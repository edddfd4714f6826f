package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

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
