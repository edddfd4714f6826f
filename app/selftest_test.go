package app

import (
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/internal/selftest"
)

// selftest.enabled adds the self-test's source and consumer and its
// handler and schema; without it there is none of them. A missing secret
// is reported under the selftest key.
func TestSelftestConfigAddsItsSourceAndConsumer(t *testing.T) {
	t.Parallel()
	env := mapEnv(map[string]string{"HOOKBRIDGE_SELFTEST_SECRET": testSecret})
	off, err := Load("", env, Overrides{}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	if off.Source(selftest.Source) != nil || off.Consumer(selftest.Consumer) != nil || len(MigrationSets(off, ordersHandlers())) != 2 {
		t.Fatalf("self-test parts without selftest.enabled: %+v %+v", off.Sources, off.Consumers)
	}

	cfg := Config{Selftest: SelftestConfig{Enabled: true, SecretEnv: stringList{"HOOKBRIDGE_SELFTEST_SECRET"}}}
	cfg.AddSelftest()
	cfg.AddSelftest() // idempotent
	cfg.ApplyEnv(env)
	if err := cfg.Complete(env, WithSelftest(cfg, ordersHandlers())); err != nil {
		t.Fatal(err)
	}
	src, cc := cfg.Source(selftest.Source), cfg.Consumer(selftest.Consumer)
	if len(cfg.Sources) != 1 || len(cfg.Consumers) != 1 || src == nil || cc == nil {
		t.Fatalf("sources %+v consumers %+v", cfg.Sources, cfg.Consumers)
	}
	if got := src.ResolvedSecrets(); len(got) != 1 || got[0] != testSecret {
		t.Fatalf("self-test secrets read: %d", len(got))
	}
	if strings.Join(cc.Sources, ",") != selftest.Source || strings.Join(cc.EventTypes, ",") != selftest.EventType {
		t.Fatalf("self-test consumer %+v", cc)
	}
	sets := MigrationSets(cfg, ordersHandlers())
	if len(sets) != 2 || sets[1].Name != "hookbridge_selftest" {
		t.Fatalf("migration sets %+v", sets)
	}
	if h := ordersHandlers(); len(WithSelftest(cfg, h)) != 2 || len(h) != 1 {
		t.Fatal("WithSelftest must add the handler to a copy")
	}

	bad := Config{Selftest: SelftestConfig{Enabled: true}}
	bad.AddSelftest()
	bad.ApplyEnv(mapEnv(nil))
	if err := bad.Complete(mapEnv(nil), WithSelftest(bad, nil)); err == nil || !strings.Contains(err.Error(), "config: selftest.secrets: no secret") {
		t.Fatalf("self-test without a secret: %v", err)
	}
}
