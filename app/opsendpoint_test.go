package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The operator commands connect, with the password the file holds, to the
// URL it names: a file others can read, or one that names anything but
// one loopback address, is refused.
func TestReadOpsEndpointRefusesUnsafeFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := OpsEndpoint{URL: "nats://127.0.0.1:4222", User: "hookbridge", Password: "pw"}
	if err := writeOpsEndpoint(dir, good); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadOpsEndpoint(dir); err != nil || got != good {
		t.Fatalf("read back %+v, %v", got, err)
	}
	path := filepath.Join(dir, OpsEndpointFile)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadOpsEndpoint(dir); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("mode 0644: %v, want refused", err)
	}

	for _, u := range []string{
		"nats://10.1.2.3:4222",
		"nats://localhost:4222", // a name, resolved by whoever answers
		"nats://[::ffff:10.1.2.3]:4222",
		// nats.Connect takes a comma-separated server list and picks from it at random.
		"nats://127.0.0.1:4222/,nats://192.0.2.1:4222",
		"nats://127.0.0.1:4222, nats://192.0.2.1:4222",
		"nats://127.0.0.1:4222?x=,nats://192.0.2.1:4222",
		"nats://127.0.0.1:4222#,nats://192.0.2.1:4222",
		"tls://192.0.2.1:4222",
		"",
	} {
		b, err := json.Marshal(OpsEndpoint{URL: u, User: "hookbridge", Password: "pw"})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		if ep, err := ReadOpsEndpoint(dir); err == nil {
			t.Errorf("url %q accepted as %+v; want refused", u, ep)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("url %q: the error holds the password: %v", u, err)
		}
	}
}
