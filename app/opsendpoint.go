package app

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The embedded JetStream server belongs to the serve process that runs it:
// a second process must not open its store. So that operator commands
// (status, replay, dead-letters requeue, ...) work while serve runs, the
// embedded server also accepts TCP clients on a random loopback port,
// with a user and password generated at every start, and serve writes
// where and how to connect to OpsEndpointFile in the data directory with
// mode 0600: only the user serve runs as can read it, and nothing
// outside the machine can reach the port.

// OpsEndpointFile is the name of the file, in the data directory, that
// tells operator commands how to reach a running serve's embedded server.
const OpsEndpointFile = "ops.json"

// OpsEndpoint is the content of [OpsEndpointFile].
type OpsEndpoint struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
}

// opsUser is the user of the loopback listener.
const opsUser = "hookbridge"

// newOpsCredentials generates a password for one run of serve.
func newOpsCredentials() (user, password string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("generate embedded server password: %w", err)
	}
	return opsUser, hex.EncodeToString(b[:]), nil
}

// writeOpsEndpoint writes e to dataDir/ops.json with mode 0600, replacing
// the file at once (a reader never sees half of it).
func writeOpsEndpoint(dataDir string, e OpsEndpoint) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode %s: %w", OpsEndpointFile, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	tmp, err := os.CreateTemp(dataDir, ".ops-*.json")
	if err != nil {
		return fmt.Errorf("write %s: %w", OpsEndpointFile, err)
	}
	defer os.Remove(tmp.Name()) // after the rename there is nothing to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", OpsEndpointFile, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", OpsEndpointFile, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", OpsEndpointFile, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dataDir, OpsEndpointFile)); err != nil {
		return fmt.Errorf("write %s: %w", OpsEndpointFile, err)
	}
	return nil
}

// ErrNoOpsEndpoint is returned by [ReadOpsEndpoint] when no serve with
// the embedded server has written the file.
var ErrNoOpsEndpoint = errors.New("no running serve with the embedded server")

// ReadOpsEndpoint reads dataDir/ops.json. It refuses a file others can
// read or one naming a host other than loopback.
func ReadOpsEndpoint(dataDir string) (OpsEndpoint, error) {
	path := filepath.Join(dataDir, OpsEndpointFile)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return OpsEndpoint{}, fmt.Errorf("%s: %w", path, ErrNoOpsEndpoint)
	}
	if err != nil {
		return OpsEndpoint{}, fmt.Errorf("read %s: %w", path, err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return OpsEndpoint{}, fmt.Errorf("%s is readable by others (mode %s); it holds a password: chmod 600 it or restart serve", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return OpsEndpoint{}, fmt.Errorf("read %s: %w", path, err)
	}
	var e OpsEndpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return OpsEndpoint{}, fmt.Errorf("read %s: %w", path, err)
	}
	u, err := loopbackURL(e.URL)
	if err != nil {
		return OpsEndpoint{}, fmt.Errorf("%s: %w; refusing it", path, err)
	}
	e.URL = u
	return e, nil
}

// loopbackURL checks that s is nats://IP:port with a loopback IP and
// nothing else, and returns it rebuilt from those parts. Anything more is
// refused rather than passed on: nats.Connect reads a comma-separated
// list of servers (and picks one at random), so "nats://127.0.0.1:4222/,
// nats://elsewhere:4222" would parse here as loopback and still send the
// password elsewhere.
func loopbackURL(s string) (string, error) {
	if strings.ContainsAny(s, ", \t\r\n") {
		return "", fmt.Errorf("url %q is not a single nats://IP:port", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("url %q: %w", s, err)
	}
	if u.Scheme != "nats" || u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("url %q is not a single nats://IP:port", s)
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("url %q is not a loopback address", s)
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil || port == 0 {
		return "", fmt.Errorf("url %q has no port", s)
	}
	return "nats://" + net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10)), nil
}

// removeOpsEndpoint deletes the file at shutdown if it is still the one
// this process wrote (a second serve started on the same data directory
// would have failed to open the store, but be safe).
func removeOpsEndpoint(dataDir string, mine OpsEndpoint) {
	cur, err := ReadOpsEndpoint(dataDir)
	if err == nil && cur == mine {
		_ = os.Remove(filepath.Join(dataDir, OpsEndpointFile)) // a left file is refused by the next reader's connect
	}
}
