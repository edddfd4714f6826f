package app

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestExampleConfigLoads(t *testing.T) {
	t.Parallel()
	secrets := t.TempDir()
	cfg, err := LoadFile("../examples/hookbridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Sources {
		if cfg.Sources[i].Name == "stripe" {
			var files stringList
			for _, n := range []string{"old", "new"} {
				p := filepath.Join(secrets, n)
				if err := os.WriteFile(p, []byte("whsec_test_"+n+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				files = append(files, p)
			}
			cfg.Sources[i].SecretFile = files
		}
	}
	cfg.ApplyEnv(mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}))
	if err := cfg.Complete(mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}), ordersHandlers()); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Sources) != 4 || len(cfg.Consumers) != 1 {
		t.Fatalf("sources %d consumers %d", len(cfg.Sources), len(cfg.Consumers))
	}
	if got := len(cfg.Sources[2].secretsRead); got != 2 {
		t.Fatalf("stripe secrets read = %d, want 2", got)
	}
	for i := range cfg.Sources {
		if _, err := cfg.Sources[i].bridgeSource(); err != nil {
			t.Fatalf("source %s: %v", cfg.Sources[i].Name, err)
		}
	}
}

func TestBadConfigNamesTheKey(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"http_adr: x\n": "http_adr",
		"sources:\n  - name: a\n    scheme: nope\n    secrets: [s]\n":                                                  "sources[0].scheme",
		"sources:\n  - name: a b\n    scheme: github\n    secrets: [s]\n":                                              "sources[0].name",
		"sources:\n  - name: a\n    scheme: github\n":                                                                  "sources[0].secrets",
		"sources:\n  - name: a\n    scheme: github\n    secret_env: NOT_SET_ANYWHERE\n":                                "sources[0].secret_env",
		"sources:\n  - name: a\n    scheme: github\n    secrets: [s]\nconsumers:\n  - name: c\n    handler: missing\n": "consumers[0].handler",
		"log_format: xml\n":                 "log_format",
		"inbox_retention: 24h\n":            "inbox_retention",
		"streams:\n  events_max_age: -1h\n": "streams.events_max_age",
		// A batch being filled sends no in-progress acks.
		"sources:\n  - name: demo\n    scheme: github\n    secrets: [s]\nconsumers:\n  - name: orders\n    handler: orders\n    batch_wait: 10s\n": "consumers[0].batch_wait",
	}
	for yaml, key := range cases {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadFile(p)
		if err == nil {
			cfg.ApplyEnv(mapEnv(nil))
			err = cfg.Complete(mapEnv(nil), ordersHandlers())
		}
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("config %q: error %v, want one naming %s", yaml, err, key)
		}
	}
}

func TestDatabaseURLFallbacks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOOKBRIDGE_DATABASE_URL": "postgres://a", "DATABASE_URL": "postgres://b"}, "postgres://a"},
		{map[string]string{"DATABASE_URL": "postgres://b", "PGHOST": "h"}, "postgres://b"},
		{map[string]string{"PGHOST": "h"}, ""},
		{nil, DefaultDatabaseURL},
	}
	for _, c := range cases {
		var cfg Config
		cfg.ApplyEnv(mapEnv(c.env))
		cfg = cfg.withDefaults()
		if got := cfg.PoolURL(); got != c.want {
			t.Errorf("env %v: url %q, want %q", c.env, got, c.want)
		}
	}
}

// TestInboxRetentionDefault: unset, inbox rows are kept 30 days (or
// streams.max_age when longer); an explicit 0 keeps them forever.
func TestInboxRetentionDefault(t *testing.T) {
	t.Parallel()
	cases := map[string]time.Duration{
		"":                             DefaultInboxRetention,
		"inbox_retention: 0s\n":        0,
		"inbox_retention: 96h\n":       96 * time.Hour,
		"streams:\n  max_age: 1000h\n": 1000 * time.Hour,
		"streams:\n  max_age: 24h\n":   DefaultInboxRetention,
	}
	for yaml, want := range cases {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ApplyEnv(mapEnv(nil))
		if err := cfg.Complete(mapEnv(nil), ordersHandlers()); err != nil {
			t.Fatalf("config %q: %v", yaml, err)
		}
		if got := cfg.InboxRetentionOrDefault(); got != want {
			t.Errorf("config %q: inbox retention %s, want %s", yaml, got, want)
		}
	}
}

// relay.retention: unset keeps sent messages for the relay's default, 0
// keeps none (deleted as published), a duration keeps them that long.
func TestRelayRetention(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		retention time.Duration
		delete    bool
	}{
		"":                           {0, false},
		"relay:\n  retention: 0s\n":  {0, true},
		"relay:\n  retention: 2h\n":  {2 * time.Hour, false},
		"relay:\n  retention: -1s\n": {-time.Second, false},
		"relay:\n  batch_size: 64\n": {0, false},
	}
	for yaml, want := range cases {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if r, d := cfg.Relay.RelayRetention(); r != want.retention || d != want.delete {
			t.Errorf("config %q: retention %s, delete sent %v; want %s, %v", yaml, r, d, want.retention, want.delete)
		}
	}
}

// A consumer's and the relay's settings are checked by the engine and
// the relay, which run with them, and each refusal is one error naming
// the key: a negative ack wait, handler timeout, max ack pending or
// relay setting is refused instead of silently taking the default, as a
// negative batch wait, concurrency or postpone limit already was.
func TestSettingsAreCheckedOnceByWhatRunsThem(t *testing.T) {
	t.Parallel()
	const base = "sources:\n  - name: demo\n    scheme: github\n    secrets: [s]\n"
	consumer := func(setting string) string {
		return base + "consumers:\n  - name: orders\n    handler: orders\n" + setting
	}
	cases := map[string]string{
		consumer("    batch_wait: -1s\n"):                          "consumers[0].batch_wait",
		consumer("    batch_wait: 10s\n"):                          "consumers[0].batch_wait", // a third of the default ack wait
		consumer("    concurrency: -1\n"):                          "consumers[0].concurrency",
		consumer("    postpone_limit: -1s\n"):                      "consumers[0].postpone_limit",
		consumer("    batch_size: 1025\n"):                         "consumers[0].batch_size",
		consumer("    ack_wait: -1s\n"):                            "consumers[0].ack_wait",
		consumer("    handler_timeout: -1s\n"):                     "consumers[0].handler_timeout",
		consumer("    max_ack_pending: -1\n"):                      "consumers[0].max_ack_pending",
		consumer("    event_types: ['']\n"):                        "consumers[0].event_types",
		consumer("    sources: [nowhere]\n"):                       "consumers[0].sources",
		base + "consumers:\n  - name: a b\n    handler: orders\n":  "consumers[0].name",
		base + "consumers:\n  - name: orders\n    handler: nope\n": "consumers[0].handler",
		base + "relay:\n  batch_size: -1\n":                        "relay.batch_size",
		base + "relay:\n  poll_interval: -1s\n":                    "relay.poll_interval",
		base + "relay:\n  max_attempts: -1\n":                      "relay.max_attempts",
	}
	for yaml, key := range cases {
		_, err := Load(writeConfig(t, yaml), mapEnv(nil), Overrides{}, ordersHandlers())
		if err == nil || strings.Count(err.Error(), "config: ") != 1 || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("config %q: error %v; want one, naming %s", yaml, err, key)
		}
	}
	// Not errors: a negative max_deliver retries forever, a negative
	// relay retention keeps sent messages.
	for _, yaml := range []string{consumer("    max_deliver: -1\n"), base + "relay:\n  retention: -1s\n"} {
		if _, err := Load(writeConfig(t, yaml), mapEnv(nil), Overrides{}, ordersHandlers()); err != nil {
			t.Errorf("config %q: %v", yaml, err)
		}
	}
}

// Validate checks and changes nothing: the secrets and the admin token
// are read by Complete, the defaults filled by it.
func TestValidateChangesNothing(t *testing.T) {
	t.Parallel()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("file-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": testSecret, "HOOKBRIDGE_ADMIN_TOKEN_FILE": token})
	build := func() Config {
		cfg, err := LoadFile(writeConfig(t, "sources:\n  - name: demo\n    scheme: standard-webhooks\n    secret_env: HOOKBRIDGE_DEMO_SECRET\n"+
			"consumers:\n  - name: orders\n    handler: orders\n"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ApplyEnv(env)
		return cfg
	}
	cfg, want := build(), build()
	want.dir = cfg.dir
	err := cfg.Validate(env, ordersHandlers())
	if err == nil || !strings.Contains(err.Error(), "sources[0].secrets: no secret") || !reflect.DeepEqual(cfg, want) {
		t.Fatalf("Validate before Complete: %v; changed the configuration: %v", err, !reflect.DeepEqual(cfg, want))
	}
	if cfg.AdminTokenValue() != "" || cfg.HTTPAddr != "" {
		t.Fatalf("Validate read the token or filled a default: %q %q", cfg.AdminTokenValue(), cfg.HTTPAddr)
	}
	if err := cfg.Complete(env, ordersHandlers()); err != nil {
		t.Fatal(err)
	}
	if cfg.AdminTokenValue() != "file-token-0123456789abcdef" || len(cfg.Sources[0].ResolvedSecrets()) != 1 ||
		cfg.HTTPAddr != DefaultHTTPAddr || cfg.DataDir != DefaultDataDir {
		t.Fatalf("Complete: token %q, secrets %d, http_addr %q, data_dir %q", cfg.AdminTokenValue(),
			len(cfg.Sources[0].ResolvedSecrets()), cfg.HTTPAddr, cfg.DataDir)
	}
}
