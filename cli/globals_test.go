package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

func TestGlobalsLastMovesOnlyTheLeadingGlobalFlags(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want []string }{
		{[]string{"--config", "c.yaml", "serve"}, []string{"serve", "--config", "c.yaml"}},
		{[]string{"--nats-url=nats://x:4222", "--data-dir", "d", "status", "--json"}, []string{"status", "--json", "--nats-url=nats://x:4222", "--data-dir", "d"}},
		{[]string{"status", "--config", "c.yaml"}, []string{"status", "--config", "c.yaml"}},
		{[]string{"--help"}, []string{"--help"}},
		{[]string{"--config", "c.yaml", "dead-letters", "show", "7"}, []string{"dead-letters", "show", "7", "--config", "c.yaml"}},
	}
	for _, c := range cases {
		if got := globalsLast(c.in); !slices.Equal(got, c.want) {
			t.Errorf("globalsLast(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The order the command line took when the global flags were the root's
// (`hookbridge --config x.yaml config check`) still works.
func TestGlobalFlagsBeforeTheCommandStillWork(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	var stdout, stderr bytes.Buffer
	rt := &runtime{handlers: builtin.Handlers(), stdout: &stdout, stderr: &stderr, env: noEnv}
	args := []string{"--config", configDir(t, checkConfig), "--database-url", db.URL, "config", "check"}
	code := run(context.Background(), args, rt, func(code int) { t.Fatalf("command line exited with %d: %s", code, stderr.String()) })
	if code != 0 || !strings.Contains(stdout.String(), "# configuration ok") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}
