package app

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"
)

// embedded_nats.sync_interval takes "always" or a positive duration and
// refuses anything else naming the key; unset, config check prints the
// default serve uses.
func TestEmbeddedSyncIntervalConfig(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]SyncInterval{
		"always": {Always: true}, "1s": {Every: time.Second}, "100ms": {Every: 100 * time.Millisecond}, "2m": {Every: 2 * time.Minute},
	} {
		var c Config
		if err := yaml.Unmarshal([]byte("embedded_nats: {sync_interval: "+v+"}"), &c); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if c.EmbeddedNATS.SyncInterval != want {
			t.Errorf("%s read as %+v, want %+v", v, c.EmbeddedNATS.SyncInterval, want)
		}
		// Printed as it is read back.
		out, err := yaml.Marshal(c.EmbeddedNATS)
		var back EmbeddedNATSConfig
		if err != nil || yaml.Unmarshal(out, &back) != nil || back != c.EmbeddedNATS {
			t.Errorf("%s printed as %q (%v), read back as %+v", v, out, err, back.SyncInterval)
		}
	}
	for _, v := range []string{"sometimes", "0s", "-1s", "[1s]", "true"} {
		var c Config
		err := yaml.Unmarshal([]byte("embedded_nats: {sync_interval: "+v+"}"), &c)
		if err == nil || !strings.Contains(err.Error(), "sync_interval") {
			t.Errorf("sync_interval %s: %v, want an error naming the key", v, err)
		}
	}

	printed := func(edit func(*Config)) string {
		cfg := testConfig(t, ordersHandlers(), edit)
		r, err := cfg.Resolved(ordersHandlers())
		if err != nil {
			t.Fatal(err)
		}
		out, err := EffectiveYAML(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if got, ok := printedValue(printed(nil), "sync_interval"); !ok || got != DefaultEmbeddedSync.String() {
		t.Errorf("config check prints sync_interval %q (%v), want the default %s", got, ok, DefaultEmbeddedSync)
	}
	if got, _ := printedValue(printed(func(c *Config) { c.EmbeddedNATS.SyncInterval = SyncInterval{Every: time.Second} }), "sync_interval"); got != "1s" {
		t.Errorf("config check prints sync_interval %q, want 1s", got)
	}
	if out := printed(func(c *Config) { c.NATSURL = "nats://127.0.0.1:4222" }); strings.Contains(out, "embedded_nats") {
		t.Errorf("with nats_url, config check prints the embedded server's settings:\n%s", out)
	}
}

// defaultEvery is the interval varz shows for the default: with
// "always", nats-server keeps its own 2 minutes for the background flush.
func defaultEvery() time.Duration {
	if DefaultEmbeddedSync.Always {
		return 2 * time.Minute
	}
	return DefaultEmbeddedSync.Every
}

// serve starts its embedded server with the configured fsync setting,
// and with the default when none is set: varz shows it.
func TestServeStartsEmbeddedNATSWithItsSyncSetting(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		set        SyncInterval
		wantAlways bool
		wantEvery  time.Duration
	}{
		"default": {SyncInterval{}, DefaultEmbeddedSync.Always, defaultEvery()},
		"100ms":   {SyncInterval{Every: 100 * time.Millisecond}, false, 100 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, ordersHandlers(), func(cfg *Config) { cfg.EmbeddedNATS.SyncInterval = c.set })
			srv := startServer(t, cfg, ordersHandlers(), RoleIngress)
			v, err := srv.embedded.Varz(&server.VarzOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := v.JetStream.Config
			if got == nil || got.SyncAlways != c.wantAlways || got.SyncInterval != c.wantEvery {
				t.Fatalf("embedded server runs with %+v; want sync_always %v, sync_interval %v", got, c.wantAlways, c.wantEvery)
			}
		})
	}
}
