package app

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]struct {
		Profiles    []string          `yaml:"profiles"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]any    `yaml:"depends_on"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// TestComposeFile checks docker-compose.yml against the code: every
// hookbridge variable it sets is one the configuration reads, the default
// services stay outside any profile, and the cluster profile has three
// routed JetStream nodes with distinct names and hookbridge instances on
// R3 streams that know all three nodes.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	record := func(k string) (string, bool) { read[k] = true; return "", false }
	var cfg Config
	cfg.ApplyEnv(record)
	DefaultSources(record)

	var natsNodes, clusterBridges []string
	for name, svc := range f.Services {
		if strings.HasPrefix(name, "hookbridge") && !slices.Equal(svc.Healthcheck.Test, []string{"CMD", "hookbridge", "healthcheck"}) {
			t.Errorf("%s healthcheck %q: want the binary's own [CMD hookbridge healthcheck]", name, svc.Healthcheck.Test)
		}
		for k := range svc.Environment {
			if (strings.HasPrefix(k, "HOOKBRIDGE_") || strings.HasPrefix(k, "OTEL_")) && !read[k] {
				t.Errorf("%s sets %s, which hookbridge does not read", name, k)
			}
		}
		switch {
		case name == "nats" || name == "postgres" || name == "hookbridge":
			if len(svc.Profiles) != 0 {
				t.Errorf("%s has profiles %v: the single-node setup must start with a plain `up`", name, svc.Profiles)
			}
		case !slices.Contains(svc.Profiles, "cluster"):
			t.Errorf("%s is not in the cluster profile", name)
		case strings.HasPrefix(name, "nats-"):
			natsNodes = append(natsNodes, name)
			cmd := strings.Join(svc.Command, " ")
			if !strings.Contains(cmd, "--server_name "+name) || !strings.Contains(cmd, "-js") ||
				!strings.Contains(cmd, "--routes nats://nats-1:6222,nats://nats-2:6222,nats://nats-3:6222") {
				t.Errorf("%s command %q: want JetStream, its own server name and routes to all three nodes", name, cmd)
			}
		case strings.HasPrefix(name, "hookbridge-"):
			clusterBridges = append(clusterBridges, name)
			env := svc.Environment
			if env["HOOKBRIDGE_STREAM_REPLICAS"] != "3" {
				t.Errorf("%s: HOOKBRIDGE_STREAM_REPLICAS = %q, want 3", name, env["HOOKBRIDGE_STREAM_REPLICAS"])
			}
			for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
				if !strings.Contains(env["HOOKBRIDGE_NATS_URL"], "nats://"+n+":4222") {
					t.Errorf("%s: HOOKBRIDGE_NATS_URL %q does not list %s", name, env["HOOKBRIDGE_NATS_URL"], n)
				}
				if _, ok := svc.DependsOn[n]; !ok {
					t.Errorf("%s does not wait for %s", name, n)
				}
			}
			var c Config
			c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if c.Streams.Replicas != 3 {
				t.Errorf("%s: streams.replicas = %d from its environment", name, c.Streams.Replicas)
			}
		}
	}
	if len(natsNodes) != 3 || len(clusterBridges) < 2 {
		t.Fatalf("cluster profile: nats nodes %v, hookbridge instances %v; want 3 and at least 2", natsNodes, clusterBridges)
	}
}

// The image's HEALTHCHECK runs the binary itself (distroless has no
// shell), with the exec form.
func TestDockerfileHealthcheck(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `CMD ["hookbridge", "healthcheck"]`) || !strings.Contains(string(b), "HEALTHCHECK ") {
		t.Fatal(`Dockerfile has no HEALTHCHECK ... CMD ["hookbridge", "healthcheck"]`)
	}
}
