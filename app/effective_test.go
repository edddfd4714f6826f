package app

import (
	"strings"
	"testing"
)

// The admin token and the self-test's inline secrets are secrets like a
// source's: `config check` prints neither.
func TestEffectiveYAMLMasksAdminTokenAndSelftestSecrets(t *testing.T) {
	t.Parallel()
	cfg := Config{
		AdminAddr:      "127.0.0.1:8081",
		AdminToken:     "admin-token-0123456789",
		AdminTokenFile: "/run/secrets/admin_token",
		Selftest:       SelftestConfig{Enabled: true, Secrets: stringList{"selftest-secret-1"}, SecretEnv: stringList{"SELFTEST_SECRET"}},
	}
	out, err := EffectiveYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"admin-token-0123456789", "selftest-secret-1"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("output holds %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"admin_token: '***'", "admin_token_file: /run/secrets/admin_token", "- SELFTEST_SECRET", "- '***'"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if cfg.AdminToken != "admin-token-0123456789" || cfg.Selftest.Secrets[0] != "selftest-secret-1" {
		t.Error("EffectiveYAML changed its argument")
	}
}
