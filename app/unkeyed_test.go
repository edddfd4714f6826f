package app

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Served as configured, a Shopify source on its defaults accepts an XML
// orders/create signed the Shopify way (its default ordering key is a
// JSON pointer), stores it unkeyed, and counts it by reason; so does the
// demo source for a body without its key. Nothing is refused.
func TestServeStoresUnreadableKeysUnkeyed(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t)
	const shopSecret = "shpss_0123456789abcdef"
	cfg := testConfig(t, ordersHandlers(), func(c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.NATSURL = js.URL()
		c.Sources = append(DefaultSources(mapEnv(map[string]string{"HOOKBRIDGE_DEMO_SECRET": testSecret})),
			SourceConfig{Name: "shop", Scheme: "shopify", Secrets: stringList{shopSecret}})
	})
	srv := startServer(t, cfg, ordersHandlers(), RoleIngress)

	body := []byte(`<?xml version="1.0" encoding="UTF-8"?>
<order>
  <id type="integer">820982911946154508</id>
  <admin-graphql-api-id>gid://shopify/Order/820982911946154508</admin-graphql-api-id>
  <email>jon@example.com</email>
</order>
`)
	mac := hmac.New(sha256.New, []byte(shopSecret))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, "http://"+srv.addr+"/webhooks/shop", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/xml")
	req.Header.Set("X-Shopify-Topic", "orders/create")
	req.Header.Set("X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
	req.Header.Set("X-Shopify-Shop-Domain", "example.myshopify.com")
	req.Header.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	if code, raw := do(t, req); code != http.StatusAccepted {
		t.Fatalf("shopify xml: %d %s, want 202", code, raw)
	}
	// The demo source is keyed by /data/order_id; this body names none.
	demo, err := hookbridgetest.NewSignedRequest(context.Background(), "http://"+srv.addr+"/webhooks/demo",
		hookbridgetest.Delivery{Secret: testSecret, ID: "evt-nokey", Time: time.Now(), Body: []byte(`{"type":"order.created","data":{}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if code, raw := do(t, demo); code != http.StatusAccepted {
		t.Fatalf("demo without key: %d %s, want 202", code, raw)
	}

	ctx := context.Background()
	hooks, err := srv.js.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	if n := streamInfo(t, srv.js, stream.Hooks).State.Msgs; n != 2 {
		t.Fatalf("HOOKS holds %d messages, want 2", n)
	}
	for subject, id := range map[string]string{
		stream.HookSubject("shop", "orders/create"): "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
		stream.HookSubject("demo", "order.created"): "evt-nokey",
	} {
		m, err := hooks.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatalf("nothing stored unkeyed on %s: %v", subject, err)
		}
		if m.Header.Get(stream.HeaderEventID) != id || m.Header.Get(stream.HeaderOrderingKey) != "" {
			t.Fatalf("%s: id %q key %q", subject, m.Header.Get(stream.HeaderEventID), m.Header.Get(stream.HeaderOrderingKey))
		}
	}
	// The counters follow the answers (they are counted once each is
	// written), so they are waited for.
	want := []string{
		`hookbridge_ingress_unkeyed_total{reason="unreadable",source="shop"} 1`,
		`hookbridge_ingress_unkeyed_total{reason="absent",source="demo"} 1`,
		`hookbridge_ingress_requests_total{source="shop",status="202"} 1`,
	}
	var metrics string
	hookbridgetest.Eventually(t, time.Minute, "the unkeyed deliveries counted", func() bool {
		mreq, err := http.NewRequest(http.MethodGet, "http://"+srv.MetricsAddr()+MetricsPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, metrics = do(t, mreq)
		for _, line := range want {
			if !strings.Contains(metrics, line+"\n") {
				return false
			}
		}
		return true
	})
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}
