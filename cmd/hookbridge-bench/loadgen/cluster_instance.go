package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// clusterInstance is one `hookbridge serve` of a cluster run: a process of
// its own on a fixed loopback address, so that the senders find it again
// after each restart.
type clusterInstance struct {
	name string
	addr string
	url  string
	dir  string // data directory and serve.log
	// env is what every start gets besides the configuration: NATS, the
	// database, the address, the data directory.
	env []string

	// mu serialises the faults acting on this instance (a kill and a
	// rolling restart may come due together).
	mu     sync.Mutex
	proc   *process
	config string   // configuration file of the next start
	roles  []string // nil: all roles
}

// newClusterInstance reserves a loopback port for the instance named name.
func newClusterInstance(name, dir, natsURL, dbURL, config string) (*clusterInstance, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &clusterInstance{
		name: name, addr: addr, url: "http://" + addr, dir: dir, config: config,
		env: []string{"HOOKBRIDGE_NATS_URL=" + natsURL, "HOOKBRIDGE_DATABASE_URL=" + dbURL, "HOOKBRIDGE_HTTP_ADDR=" + addr,
			"HOOKBRIDGE_DATA_DIR=" + filepath.Join(dir, "data")},
	}, nil
}

// startLocked runs `exe serve` with the instance's configuration and roles
// and returns once its /readyz answers 200 (for its roles). in.mu is held.
func (in *clusterInstance) startLocked(ctx context.Context, exe string) error {
	args := []string{"serve"}
	for _, r := range in.roles {
		args = append(args, "--role", r)
	}
	env := cleanEnv(append(slices.Clone(in.env), "HOOKBRIDGE_CONFIG="+in.config))
	p, err := startProcess(in.name, exe, args, env, filepath.Join(in.dir, "serve.log"), nil)
	if err != nil {
		return err
	}
	query := ""
	// readyz narrows to the ingress, consumer and relay roles only; an
	// instance of the delivery role alone is ready when all its
	// dependencies are.
	if len(in.roles) == 1 && in.roles[0] != "delivery" {
		query = "?role=" + in.roles[0]
	}
	// serve migrates, connects and creates its durables before it is
	// ready: seconds on a busy machine, a minute at the very most.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited before it was ready: %v (log: %s)", in.name, err, p.log)
		case <-ctx.Done():
			_ = p.stop(10 * time.Second)
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if ready(ctx, in.url+"/readyz"+query) {
			in.proc = p
			return nil
		}
	}
	_ = p.stop(10 * time.Second)
	return fmt.Errorf("%s not ready after a minute (log: %s)", in.name, p.log)
}

// ready reports whether url answers 200 within 5 s (readyz gives its
// checks 2 s).
func ready(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// start starts the instance.
func (in *clusterInstance) start(ctx context.Context, exe string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.startLocked(ctx, exe)
}

// stopTimeout bounds a SIGTERM's wait: serve applies what it holds within
// handler_timeout (30 s by default) and then drains its NATS connection.
const stopTimeout = time.Minute

// stopLocked sends SIGTERM and waits for the process to exit. in.mu is
// held.
func (in *clusterInstance) stopLocked() error {
	if in.proc == nil {
		return nil
	}
	p := in.proc
	in.proc = nil
	return p.stop(stopTimeout)
}

// stop stops the instance (SIGTERM).
func (in *clusterInstance) stop() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stopLocked()
}

// kill sends SIGKILL and waits for the process to be gone.
func (in *clusterInstance) kill() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc == nil {
		return fmt.Errorf("%s is not running", in.name)
	}
	p := in.proc
	in.proc = nil
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", in.name, err)
	}
	<-p.done // its exit status is the signal's
	return nil
}

// restart stops the instance (SIGTERM), applies change, and starts it.
func (in *clusterInstance) restart(ctx context.Context, exe string, change func(*clusterInstance)) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.stopLocked(); err != nil {
		return err
	}
	if change != nil {
		change(in)
	}
	return in.startLocked(ctx, exe)
}

// startIfStopped starts the instance unless it runs, and reports whether
// it did.
func (in *clusterInstance) startIfStopped(ctx context.Context, exe string) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc != nil {
		return false, nil
	}
	return true, in.startLocked(ctx, exe)
}
