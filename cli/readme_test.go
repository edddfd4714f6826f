package cli

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// readmeCommands are the commands of the README's ```sh blocks, one per
// line, in order.
func readmeCommands(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	rest := string(b)
	for {
		_, after, ok := strings.Cut(rest, "\n```sh\n")
		if !ok {
			return blocks
		}
		block, tail, ok := strings.Cut(after, "\n```\n")
		if !ok {
			t.Fatal("README.md: a ```sh block is not closed")
		}
		var cmds []string
		for _, line := range strings.Split(block, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				cmds = append(cmds, line)
			}
		}
		blocks = append(blocks, cmds)
		rest = tail
	}
}

// readmeShell runs one README command line with sh, as a reader would
// paste it, except that `go run ./cmd/hookbridge` runs this test binary
// as the hookbridge binary (TestMain), which is that command built.
type readmeShell struct {
	dir string   // the repository's root
	env []string // the commands' environment
}

func newReadmeShell(t *testing.T, env ...string) *readmeShell {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// Only what the commands need: none of the caller's HOOKBRIDGE_*,
	// DATABASE_URL or PG* settings reach them.
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "HOOKBRIDGE_README_BIN=" + self}
	return &readmeShell{dir: root, env: append(base, env...)}
}

// goFunction stands in for the go command in the README's lines.
const goFunction = `go() {
  if [ "$1" = run ] && [ "$2" = ./cmd/hookbridge ]; then
    shift 2
    ` + asHookbridge + `=1 exec "$HOOKBRIDGE_README_BIN" "$@"
  fi
  echo "the README test runs only go run ./cmd/hookbridge, not: go $*" >&2
  exit 127
}
`

func (s *readmeShell) command(line string) *exec.Cmd {
	cmd := exec.Command("sh", "-c", goFunction+line)
	cmd.Dir, cmd.Env = s.dir, s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs line to its end and returns its exit code and output.
func (s *readmeShell) run(t *testing.T, line string) (int, string) {
	t.Helper()
	cmd := s.command(line)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	default:
		t.Fatalf("%s: %v", line, err)
		return -1, ""
	}
}

// freeAddr is a loopback address nothing listens on (serve is told it
// before it starts, and every README command reaches it by it).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The README holds exactly two set-up commands, serve and the tests, then
// a walkthrough. Its commands run as written against a fresh database and
// the embedded JetStream: serve comes up; send answers 202, the same send
// more than a second later 200 duplicate with exit 0, other data 409 with
// a non-zero exit; status works; the psql line, with -d naming the test's
// database, shows the order.
func TestREADMECommandsDoWhatTheREADMESays(t *testing.T) {
	t.Parallel()
	blocks := readmeCommands(t)
	if len(blocks) < 3 || len(blocks[0]) != 1 || len(blocks[1]) != 1 {
		t.Fatalf("README.md: want a block with the serve command, one with the test command, then the walkthrough; have %q", blocks)
	}
	serveLine, testLine := blocks[0][0], blocks[1][0]
	if serveLine != "go run ./cmd/hookbridge serve" || !strings.HasPrefix(testLine, "go test ") {
		t.Fatalf("README.md's set-up commands are %q and %q", serveLine, testLine)
	}
	var walk []string
	for _, b := range blocks[2:] {
		walk = append(walk, b...)
	}

	db := hookbridgetest.EmptyPostgres(t) // serve migrates it, as it would a new user's
	addr := freeAddr(t)
	sh := newReadmeShell(t, "HOOKBRIDGE_DATABASE_URL="+db.URL, "HOOKBRIDGE_HTTP_ADDR="+addr, "HOOKBRIDGE_DATA_DIR="+t.TempDir())
	serveOut := startREADMEServe(t, sh, serveLine, addr)

	psqlDatabase := regexp.MustCompile(`\s-d\s+(\S+)`)
	sent := false
	for _, line := range walk {
		switch {
		case strings.Contains(line, "./cmd/hookbridge send "):
			readmeSend(t, sh, line)
			sent = true
		case strings.HasPrefix(line, "psql "):
			if !psqlDatabase.MatchString(line) {
				t.Fatalf("the README's psql line names no database (-d): %s", line)
			}
			hookbridgetest.Eventually(t, 2*time.Minute, "the order applied", func() bool {
				return db.Count(t, `SELECT count(*) FROM demo.orders`) == 1
			})
			line = psqlDatabase.ReplaceAllString(line, " -d "+db.Name)
			if code, out := sh.run(t, line); code != 0 || !strings.Contains(out, "o-1") || !strings.Contains(out, "(1 row)") {
				t.Fatalf("%s: exit %d\n%s", line, code, out)
			}
		default:
			if code, out := sh.run(t, line); code != 0 {
				t.Fatalf("%s: exit %d\n%s\nserve's output:\n%s", line, code, out, serveOut)
			} else if strings.HasSuffix(line, " status") && !regexpLine(out, `^HOOKS\s+orders\s`) {
				t.Fatalf("%s does not show the orders consumer:\n%s", line, out)
			}
		}
	}
	if !sent {
		t.Fatal("the README's walkthrough sends no event")
	}
}

// startREADMEServe runs the README's serve line until the test ends and
// returns once its /readyz answers 200; its output is in the buffer.
func startREADMEServe(t *testing.T, sh *readmeShell, line, addr string) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	cmd := sh.command(line)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve after SIGTERM: %v\n%s", err, out.String())
			}
		case <-time.After(time.Minute):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("serve did not stop within a minute of SIGTERM")
		}
	})
	hookbridgetest.Eventually(t, 2*time.Minute, "serve ready", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("serve exited: %v\n%s", err, out.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return out
}

// readmeSend runs the README's send line: 202; the same line more than a
// second later, 200 duplicate and exit 0; with other data, 409 and a
// non-zero exit.
func readmeSend(t *testing.T, sh *readmeShell, line string) {
	t.Helper()
	if code, out := sh.run(t, line); code != 0 || !strings.HasPrefix(out, "202 Accepted ") {
		t.Fatalf("%s: exit %d, want 0 and 202\n%s", line, code, out)
	}
	time.Sleep(1100 * time.Millisecond) // the body once carried the time of sending, to the second
	if code, out := sh.run(t, line); code != 0 || !strings.HasPrefix(out, "200 OK ") || !strings.Contains(out, `"status":"duplicate"`) {
		t.Fatalf("%s again: exit %d, want 0 and 200 duplicate\n%s", line, code, out)
	}
	other := regexp.MustCompile(`--data '[^']*'`).ReplaceAllString(line, `--data '{"order_id":"o-1","amount_cents":1,"currency":"EUR"}'`)
	if other == line {
		t.Fatalf("the README's send line has no --data '…': %s", line)
	}
	if code, out := sh.run(t, other); code == 0 || !strings.HasPrefix(out, "409 Conflict ") {
		t.Fatalf("%s: exit %d, want non-zero and 409\n%s", other, code, out)
	}
}

// syncBuffer lets a process's stdout and stderr share one buffer, read
// when the test reports.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The README's command table names every command of the command line.
func TestREADMECommandTableNamesEveryCommand(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	// A command of three words (`hookbridge endpoints dead-letters
	// list|requeue`) is named with its third word's alternatives.
	cell := regexp.MustCompile("`hookbridge ([a-z-]+)(?: ([a-z|\\\\-]+))?(?: ([a-z|\\\\-]+))?")
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `hookbridge ") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			named[m[1]] = true
			for _, sub := range strings.Split(strings.ReplaceAll(m[2], `\|`, "|"), "|") {
				named[m[1]+" "+sub] = true
				for _, third := range strings.Split(strings.ReplaceAll(m[3], `\|`, "|"), "|") {
					named[m[1]+" "+sub+" "+third] = true
				}
			}
		}
	}
	var cli cliCommands
	parser, err := kong.New(&cli, kong.Name("hookbridge"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		leaf := true
		for _, c := range n.Children {
			if c.Type == kong.CommandNode {
				leaf = false
				walk(c)
			}
		}
		if path := strings.TrimPrefix(n.FullPath(), "hookbridge "); leaf && n.Type == kong.CommandNode && !named[path] {
			t.Errorf("README.md's command table does not name `hookbridge %s`", path)
		}
	}
	walk(parser.Model.Node)
}
