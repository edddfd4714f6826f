package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
)

func TestObservabilityConfigFromEnv(t *testing.T) {
	t.Parallel()
	var cfg Config
	cfg.Streams.Replicas = 1 // from the file; the environment wins
	env := mapEnv(map[string]string{
		"HOOKBRIDGE_STREAM_REPLICAS":  "3",
		"HOOKBRIDGE_METRICS_ADDR":     "0.0.0.0:9090",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318",
		"OTEL_SERVICE_NAME":           "hookbridge-eu",
	})
	cfg.ApplyEnv(env)
	if cfg.Streams.Replicas != 3 || cfg.MetricsAddr != "0.0.0.0:9090" ||
		cfg.Tracing.OTLPEndpoint != "http://otel:4318" || cfg.Tracing.ServiceName != "hookbridge-eu" {
		t.Fatalf("config = %+v", cfg)
	}
	cfg.Sources = DefaultSources(env)
	if err := cfg.Complete(env, ordersHandlers()); err != nil {
		t.Fatal(err)
	}

	for env, key := range map[string]string{
		"HOOKBRIDGE_STREAM_REPLICAS=three": "streams.replicas",
		"HOOKBRIDGE_STREAM_REPLICAS=7":     "streams.replicas",
		"HOOKBRIDGE_OTLP_ENDPOINT=ftp://x": "tracing.otlp_endpoint",
	} {
		k, v, _ := strings.Cut(env, "=")
		var cfg Config
		e := mapEnv(map[string]string{k: v})
		cfg.ApplyEnv(e)
		cfg.Sources = DefaultSources(e)
		if err := cfg.Complete(e, ordersHandlers()); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming %s", env, err, key)
		}
	}
}

// TestMetricsAddrServesMetricsApart: with metrics_addr set, /metrics is
// served there and not on the webhook address.
func TestMetricsAddrServesMetricsApart(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.NATSURL = js.URL()
	})
	srv := startServer(t, cfg, ordersHandlers(), RoleIngress)
	addr := srv.addr
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("http://" + srv.MetricsAddr() + MetricsPath)
	if code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("metrics address: %d\n%s", code, body)
	}
	if code, _ := get("http://" + addr + MetricsPath); code != http.StatusNotFound {
		t.Fatalf("/metrics on the webhook address: %d, want 404", code)
	}
	// An ingress-only instance is ready with NATS alone.
	hookbridgetest.Eventually(t, time.Minute, "ready", func() bool {
		code, _ := get("http://" + addr + "/readyz")
		return code == http.StatusOK
	})
}

// TestReadyzReflectsConsumerState: a consumer instance is not ready while
// it cannot reach Postgres (so it has not created its durable consumer),
// is ready once the durable consumer exists, and is not ready again when
// the durable consumer disappears from JetStream.
func TestReadyzReflectsConsumerState(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	readyz := func(addr string) (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	start := func(dbURL string) string {
		cfg := testConfig(t, ordersHandlers(), func(c *Config) {
			c.NATSURL = js.URL()
			c.DatabaseURL = dbURL
		})
		return startServer(t, cfg, ordersHandlers(), RoleConsumer).addr
	}

	// Postgres unreachable: NATS is fine, the consumer is not ready.
	down := start("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	// The NATS check answers within readyz's 2 s on a quiet machine only.
	code, body := readyz(down)
	hookbridgetest.Eventually(t, time.Minute, "the NATS check answered", func() bool {
		code, body = readyz(down)
		return strings.Contains(body, `"nats":"ok"`)
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"consumers":"unavailable"`) || !strings.Contains(body, `"nats":"ok"`) {
		t.Fatalf("readyz without postgres = %d %s", code, body)
	}

	db := hookbridgetest.Postgres(t)
	up := start(db.URL)
	hookbridgetest.Eventually(t, time.Minute, "ready", func() bool {
		code, _ := readyz(up)
		return code == http.StatusOK
	})
	if _, body := readyz(up); !strings.Contains(body, `"consumers":"ok"`) {
		t.Fatalf("readyz = %s, want consumers ok", body)
	}
	if err := js.JS.DeleteConsumer(context.Background(), "HOOKS", "orders"); err != nil {
		t.Fatal(err)
	}
	hookbridgetest.Eventually(t, time.Minute, "not ready without the durable", func() bool {
		code, body = readyz(up)
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, `"consumers":"unavailable"`) {
		t.Fatalf("readyz after the durable consumer vanished = %d %s", code, body)
	}
}
