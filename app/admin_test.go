package app

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

func adminGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Serve with an admin token answers the admin API and the console on
// admin_addr, and neither on the webhook address.
func TestServeAdminListener(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	const token = "serve-admin-token-0123456789"
	handlers := ordersHandlers()
	cfg := testConfig(t, handlers, func(c *Config) {
		c.DatabaseURL = db.URL
		c.AdminAddr = "127.0.0.1:0"
		c.AdminToken = token
	})
	srv := startServer(t, cfg, handlers)
	admin := "http://" + srv.AdminAddr()
	if srv.AdminAddr() == "" || srv.AdminAddr() == srv.addr {
		t.Fatalf("admin address %q (webhooks on %s)", srv.AdminAddr(), srv.addr)
	}
	hookbridgetest.Eventually(t, time.Minute, "status ready", func() bool {
		code, body := adminGet(t, admin+"/api/v1/status", token)
		return code == http.StatusOK && strings.Contains(body, `"ready":true`)
	})
	if code, _ := adminGet(t, admin+"/api/v1/status", ""); code != http.StatusUnauthorized {
		t.Fatalf("status without token: %d, want 401", code)
	}
	if code, body := adminGet(t, admin+"/", ""); code != http.StatusOK || !strings.Contains(strings.ToLower(body), "<html") {
		t.Fatalf("console: %d %.200s", code, body)
	}
	if code, _ := adminGet(t, "http://"+srv.addr+"/api/v1/status", token); code == http.StatusOK {
		t.Fatal("the webhook address answers the admin API")
	}
}

// Without a token there is no admin listener, and serve says how to turn
// it on.
func TestServeAdminOffWithoutToken(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	handlers := ordersHandlers()
	cfg := testConfig(t, handlers, func(c *Config) {
		c.DatabaseURL = db.URL
		c.AdminAddr = "127.0.0.1:0"
	})
	logs := &hookbridgetest.LogBuffer{}
	srv, err := NewServer(cfg, handlers, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rs := startPrepared(t, srv)
	if rs.AdminAddr() != "" {
		t.Fatalf("admin listener on %s without a token", rs.AdminAddr())
	}
	if err := rs.stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "HOOKBRIDGE_ADMIN_TOKEN") {
		t.Fatalf("serve did not say how to enable the admin API:\n%s", logs.String())
	}
}

func TestAdminConfig(t *testing.T) {
	t.Parallel()
	env := mapEnv(map[string]string{"HOOKBRIDGE_ADMIN_TOKEN": "  env-token-0123456789abcdef \n", "HOOKBRIDGE_ADMIN_ADDR": "127.0.0.1:9999"})
	cfg, err := Load("", env, Overrides{}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminAddr != "127.0.0.1:9999" || cfg.AdminTokenValue() != "env-token-0123456789abcdef" {
		t.Fatalf("admin addr %q, token %q", cfg.AdminAddr, cfg.AdminTokenValue())
	}
	cfg, err = Load("", mapEnv(nil), Overrides{}, ordersHandlers())
	if err != nil || cfg.AdminAddr != DefaultAdminAddr || cfg.AdminTokenValue() != "" {
		t.Fatalf("defaults: addr %q, token %q, %v", cfg.AdminAddr, cfg.AdminTokenValue(), err)
	}
	if _, err := Load("", mapEnv(map[string]string{"HOOKBRIDGE_ADMIN_TOKEN": "short"}), Overrides{}, ordersHandlers()); err == nil || !strings.Contains(err.Error(), "admin_token") {
		t.Fatalf("short token: %v", err)
	}
	if _, err := Load("", mapEnv(map[string]string{"HOOKBRIDGE_ADMIN_TOKEN": "env-token-0123456789abcdef", "HOOKBRIDGE_ADMIN_ADDR": "127.0.0.1:8080"}), Overrides{}, ordersHandlers()); err == nil || !strings.Contains(err.Error(), "admin_addr") {
		t.Fatalf("admin on the webhook address: %v", err)
	}
	if _, err := Load("", mapEnv(map[string]string{"HOOKBRIDGE_ADMIN_TOKEN_FILE": t.TempDir() + "/missing"}), Overrides{}, ordersHandlers()); err == nil || !strings.Contains(err.Error(), "admin_token_file") {
		t.Fatalf("missing token file: %v", err)
	}
	// The token is the file's first line; a comment below it is not part
	// of it.
	file := t.TempDir() + "/token"
	if err := os.WriteFile(file, []byte("file-token-0123456789abcdef\n# rotated 2026-11\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = Load("", mapEnv(map[string]string{"HOOKBRIDGE_ADMIN_TOKEN_FILE": file}), Overrides{}, ordersHandlers())
	if err != nil || cfg.AdminTokenValue() != "file-token-0123456789abcdef" {
		t.Fatalf("token file: token %q, %v", cfg.AdminTokenValue(), err)
	}
}
