package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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

// A HOOKBRIDGE_* variable set to "" is unset: `HOOKBRIDGE_CONFIG=` means
// no file (it used to name the working directory, "is a directory"), and
// an empty HOOKBRIDGE_HTTP_ADDR leaves the default. A variable with a
// value is read as before.
func TestEmptyHookbridgeVariablesAreUnset(t *testing.T) {
	// Not parallel: it sets the process's environment.
	t.Setenv("HOOKBRIDGE_CONFIG", "")
	t.Setenv("HOOKBRIDGE_HTTP_ADDR", "")
	check := func() string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		rt := &runtime{handlers: builtin.Handlers(), stdout: &stdout, stderr: &stderr, env: osEnv}
		code := run(context.Background(), []string{"config", "check"}, rt, func(code int) { t.Fatalf("command line exited with %d: %s", code, stderr.String()) })
		if code != 0 {
			t.Fatalf("config check: exit %d\n%s%s", code, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	if out := check(); !strings.Contains(out, "http_addr: 127.0.0.1:8080\n") {
		t.Fatalf("config check with empty variables:\n%s", out)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "hookbridge.yaml")
	if err := os.WriteFile(path, []byte("http_addr: 127.0.0.1:9999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOOKBRIDGE_CONFIG", path)
	if out := check(); !strings.Contains(out, "http_addr: 127.0.0.1:9999\n") {
		t.Fatalf("config check with HOOKBRIDGE_CONFIG set:\n%s", out)
	}
	if v, ok := osEnv("HOOKBRIDGE_HTTP_ADDR"); ok || v != "" {
		t.Fatalf("osEnv(empty HOOKBRIDGE_HTTP_ADDR) = %q, %v; want unset", v, ok)
	}
}
