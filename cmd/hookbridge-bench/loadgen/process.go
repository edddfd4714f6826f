package loadgen

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookbridge/hookbridge/internal/embedded"
)

// Processes of their own: a nats-server and a `hookbridge serve`, so that
// the load generator's CPU and memory are not mixed into theirs, and each
// one's RSS and CPU can be read from /proc.

// process is a child process and its log file.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan error
	log  string
}

// Pid is the process id.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// CPU is the CPU time the process has used so far.
func (p *process) CPU() time.Duration { return procCPU(p.Pid()) }

// RSSKB is its resident set in KiB.
func (p *process) RSSKB() int64 { return ReadPIDRSS(p.Pid()) }

// startProcess runs exe args with env, its stderr (and stdout unless
// stdout is given) appended to logPath; stdout is closed once the process
// has exited.
func startProcess(name, exe string, args, env []string, logPath string, stdout io.WriteCloser) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stderr = logFile
	cmd.Stdout = logFile
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		if stdout != nil {
			stdout.Close()
		}
		p.done <- err
	}()
	return p, nil
}

// stop sends SIGTERM and waits up to timeout, then kills.
func (p *process) stop(timeout time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%s exited with %v (log: %s)", p.name, err, p.log)
		}
		return err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s; killed (log: %s)", p.name, timeout, p.log)
	}
}

// ServeNATS runs a JetStream server (the nats-server version hookbridge
// embeds) listening on a free loopback port with its store in dir, prints
// "nats-url <url>" to out once it accepts clients, and runs until ctx
// ends: `hookbridge-bench --mode nats-server`, which the external modes
// start as a process of its own.
func ServeNATS(ctx context.Context, dir string, maxPayload int64, out io.Writer) error {
	ns, err := embedded.Start(embedded.Options{StoreDir: dir, Listen: true, Host: "127.0.0.1", Port: server.RANDOM_PORT, MaxPayload: maxPayload})
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	fmt.Fprintln(out, "nats-url", ns.ClientURL())
	<-ctx.Done()
	return nil
}

// startNATSProcess starts `exe --mode nats-server` with its store in
// dir and returns it with its client URL.
func startNATSProcess(ctx context.Context, exe, dir string) (*process, string, error) {
	pr, pw := io.Pipe()
	p, err := startProcess("nats-server", exe, []string{"--mode", "nats-server", "--nats-store", filepath.Join(dir, "store")},
		cleanEnv(nil), filepath.Join(dir, "nats.log"), pw)
	if err != nil {
		return nil, "", err
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "nats-url "); ok {
				urlc <- u
			}
		}
	}()
	select {
	case u := <-urlc:
		return p, u, nil
	case err := <-p.done:
		p.done <- err
		return nil, "", fmt.Errorf("nats-server process exited: %v (log: %s)", err, p.log)
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	_ = p.stop(5 * time.Second)
	return nil, "", fmt.Errorf("nats-server process did not report its URL (log: %s)", p.log)
}

// serveProcess is a `hookbridge serve` running in a process of its own.
type serveProcess struct {
	*process
	URL    string
	Secret string
}

// startServeProcess runs `exe serve` with the default configuration (no
// configuration file, no HOOKBRIDGE_* variable inherited) except the NATS
// URL, the database, a free loopback HTTP port, a random secret for the
// demo source and roles; it returns once /readyz answers 200.
func startServeProcess(ctx context.Context, exe, dir, natsURL, dbURL string, demo *demoConfig, roles []string) (*serveProcess, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	key := make([]byte, 24)
	_, _ = rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	args := []string{"serve"}
	for _, r := range roles {
		args = append(args, "--role", r)
	}
	env := []string{
		"HOOKBRIDGE_NATS_URL=" + natsURL, "HOOKBRIDGE_DATABASE_URL=" + dbURL, "HOOKBRIDGE_HTTP_ADDR=" + addr,
		"HOOKBRIDGE_DEMO_SECRET=" + secret, "HOOKBRIDGE_DATA_DIR=" + filepath.Join(dir, "data"),
	}
	if demo != nil {
		path := filepath.Join(dir, "hookbridge.yaml")
		if err := os.WriteFile(path, demo.yaml(secret), 0o600); err != nil {
			return nil, err
		}
		env = append(env, "HOOKBRIDGE_CONFIG="+path)
	}
	p, err := startProcess("hookbridge serve", exe, args, cleanEnv(env), filepath.Join(dir, "serve.log"), nil)
	if err != nil {
		return nil, err
	}
	sp := &serveProcess{process: p, URL: "http://" + addr, Secret: secret}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return nil, fmt.Errorf("hookbridge serve exited before it was ready: %v (log: %s)", err, p.log)
		case <-ctx.Done():
			_ = p.stop(10 * time.Second)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		query := ""
		if len(roles) == 1 && roles[0] == "ingress" {
			query = "?role=ingress"
		}
		if resp, err := http.Get(sp.URL + "/readyz" + query); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return sp, nil
			}
		}
	}
	_ = p.stop(10 * time.Second)
	return nil, fmt.Errorf("hookbridge serve not ready after 60s (log: %s)", p.log)
}

// cleanEnv is this process's environment without HOOKBRIDGE_*, OTEL_* and
// DATABASE_URL variables (so the child runs the defaults), plus extra.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "HOOKBRIDGE_") || strings.HasPrefix(k, "OTEL_") || k == "DATABASE_URL" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// demoConfig is a configuration file that declares the default demo
// source and orders consumer with one change: no ordering key, or
// another partition count.
type demoConfig struct {
	Unkeyed    bool
	Partitions int
}

func (d demoConfig) yaml(secret string) []byte {
	key := "{pointer: /data/order_id}"
	if d.Unkeyed {
		key = "none"
	}
	var b strings.Builder
	if d.Partitions > 0 {
		fmt.Fprintf(&b, "streams:\n  partitions: %d\n", d.Partitions)
	}
	fmt.Fprintf(&b, "sources:\n  - name: demo\n    scheme: standard-webhooks\n    secrets: [%q]\n    ordering_key: %s\n", secret, key)
	b.WriteString("consumers:\n  - name: orders\n    handler: orders\n    sources: [demo]\n")
	return []byte(b.String())
}
