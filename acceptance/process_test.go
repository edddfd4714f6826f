package acceptance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// The black-box tests run hookbridge as users do: several `serve`
// processes (this test binary run as the hookbridge command, see
// TestMain) on one NATS server and one database, configured by a file
// and the environment, driven over HTTP and by the command line, and
// counted from the database afterwards.

// deployment is what the processes of one test share: the NATS server,
// the database and the configuration file.
type deployment struct {
	t       *testing.T
	natsURL string
	db      *hookbridgetest.Database
	dir     string
}

func newDeployment(t *testing.T, db *hookbridgetest.Database) *deployment {
	t.Helper()
	ns := hookbridgetest.NATS(t)
	return &deployment{t: t, natsURL: ns.URL(), db: db, dir: t.TempDir()}
}

// writeConfig writes the configuration file the next processes read
// (HOOKBRIDGE_CONFIG) and the files it names, relative to it.
func (d *deployment) writeConfig(yaml string, files map[string]string) {
	d.t.Helper()
	for name, text := range files {
		path := filepath.Join(d.dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			d.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d.dir, "hookbridge.yaml"), []byte(yaml), 0o600); err != nil {
		d.t.Fatal(err)
	}
}

// env is a hookbridge process's environment: none of this process's
// HOOKBRIDGE_*, DATABASE_URL or PG* settings, the deployment's NATS,
// database and configuration, and extra.
func (d *deployment) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "HOOKBRIDGE_") || strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "PG") || k == "DATABASE_URL" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, asHookbridge+"=1", "HOOKBRIDGE_NATS_URL="+d.natsURL, "HOOKBRIDGE_DATABASE_URL="+d.db.URL,
		"HOOKBRIDGE_CONFIG="+filepath.Join(d.dir, "hookbridge.yaml"), "HOOKBRIDGE_DEMO_SECRET="+secret)
	return append(env, extra...)
}

func (d *deployment) command(args []string, extra ...string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		d.t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = d.env(extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// serveProc is one running `hookbridge serve`.
type serveProc struct {
	name string
	url  string // http://host:port of its HTTP listener
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
	stop func()
}

// serve starts `hookbridge serve` with args and returns once its
// /readyz (for the ingress role alone, ?role=ingress) answers 200. It is
// stopped with SIGTERM when the test ends, or by stop.
func (d *deployment) serve(name string, args ...string) *serveProc {
	d.t.Helper()
	addr := freeAddr(d.t)
	p := &serveProc{name: name, url: "http://" + addr, out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = d.command(append([]string{"serve"}, args...), "HOOKBRIDGE_HTTP_ADDR="+addr,
		"HOOKBRIDGE_DATA_DIR="+filepath.Join(d.dir, name), "HOOKBRIDGE_LOG_LEVEL=info")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-p.done:
				if err != nil {
					d.t.Errorf("%s after SIGTERM: %v\n%s", name, err, p.out.String())
				}
			case <-time.After(time.Minute):
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.done
				d.t.Errorf("%s did not stop within a minute of SIGTERM\n%s", name, p.out.String())
			}
		})
	}
	d.t.Cleanup(p.stop)
	query := ""
	if len(args) == 2 && args[0] == "--role" && args[1] == "ingress" {
		query = "?role=ingress"
	}
	hookbridgetest.Eventually(d.t, 2*time.Minute, name+" ready", func() bool {
		select {
		case err := <-p.done:
			p.done <- err
			d.t.Fatalf("%s exited: %v\n%s", name, err, p.out.String())
		default:
		}
		resp, err := http.Get(p.url + "/readyz" + query)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// run runs a hookbridge command to its end and returns its exit code,
// stdout and stderr.
func (d *deployment) run(args ...string) (int, string, string) {
	d.t.Helper()
	cmd := d.command(args)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	default:
		d.t.Fatalf("hookbridge %s: %v", strings.Join(args, " "), err)
		return -1, "", ""
	}
}

// send posts a delivery to source on p, signed with the test secret, and
// fails the test unless it is answered 202.
func (p *serveProc) send(t *testing.T, source, id string, body []byte) {
	t.Helper()
	req := hookbridgetest.SignedRequest(t, p.url+"/webhooks/"+source, hookbridgetest.Delivery{Secret: secret, ID: id, Body: body})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: post %s: %v", p.name, id, err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%s: %s answered %d %s, want 202", p.name, id, resp.StatusCode, answer)
	}
}

// counter is the value of a counter's series with exactly these labels
// (name, value, ...) on p's /metrics, 0 when it has none.
func (p *serveProc) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return max(0, scrapeMetrics(t, p.url+"/metrics").value(name, labels...))
}

// jsonLines decodes the JSON objects of out, one a line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		objs = append(objs, m)
	}
	return objs
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a process's output, written by its copier goroutines and
// read by the test.
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

// logs are the outputs of procs, for a failure's message.
func logs(procs ...*serveProc) string {
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "--- %s\n%s", p.name, p.out.String())
	}
	return b.String()
}
