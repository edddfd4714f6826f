package bridge_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// shopifyXMLOrder is an orders/create delivery of a subscription made with
// format "xml", as Shopify sends it: the same fields as the JSON payload,
// dashed element names, types in attributes.
const shopifyXMLOrder = `<?xml version="1.0" encoding="UTF-8"?>
<order>
  <id type="integer">820982911946154508</id>
  <admin-graphql-api-id>gid://shopify/Order/820982911946154508</admin-graphql-api-id>
  <email>jon@example.com</email>
  <created-at type="dateTime">2026-12-02T12:00:00-05:00</created-at>
  <currency>USD</currency>
  <total-price type="decimal">598.94</total-price>
  <line-items type="array">
    <line-item>
      <id type="integer">866550311766439020</id>
      <title>IPod Nano - 8GB</title>
      <quantity type="integer">1</quantity>
    </line-item>
  </line-items>
</order>
`

// signShopify signs body the way Shopify does, independently of the
// verifier under test: base64 of HMAC-SHA256 of the raw body under the
// app's client secret, in X-Shopify-Hmac-Sha256.
func signShopify(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// unkeyedTracer records the UnkeyedReason of every accepted delivery.
type unkeyedTracer struct {
	mu      sync.Mutex
	reasons map[string]string // event id -> reason ("" keyed)
}

func (t *unkeyedTracer) TraceReceiveStart(ctx context.Context, _ bridge.TraceReceiveStartData) context.Context {
	return ctx
}

func (t *unkeyedTracer) TraceReceiveEnd(_ context.Context, d bridge.TraceReceiveEndData) {
	if d.Unkeyed != (d.UnkeyedReason != "") {
		panic("Unkeyed and UnkeyedReason disagree")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reasons == nil {
		t.reasons = map[string]string{}
	}
	t.reasons[d.EventID] = d.UnkeyedReason
}

func (t *unkeyedTracer) TracePublishStart(ctx context.Context, _ bridge.TracePublishStartData) context.Context {
	return ctx
}

func (t *unkeyedTracer) TracePublishEnd(context.Context, bridge.TracePublishEndData) {}

func (t *unkeyedTracer) reason(id string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.reasons[id]
	return r, ok
}

// A verified delivery whose ordering key cannot be read is stored unkeyed
// and counted, never refused: Shopify in XML (the default key is a JSON
// pointer, the id and type are headers), and, for every keyed default, a
// body without the pointer or with a value that is not a string or number.
// A key from a header works for any body. A source whose id or type is
// read from the body still needs JSON.
func TestUnreadableOrderingKeyIsStoredUnkeyed(t *testing.T) {
	t.Parallel()
	shopify := schemeNamed(t, verify.SchemeShopify)
	stripe := schemeNamed(t, verify.SchemeStripe)
	shopSrc := shopify.source(t)
	shopSrc.OrderingKey = bridge.DefaultOrderingKey(verify.SchemeShopify)
	byHeader := shopify.source(t)
	byHeader.Name = "shopify-by-shop"
	byHeader.OrderingKey = &bridge.Field{Header: "X-Shopify-Shop-Domain"}
	stripeSrc := stripe.source(t)
	stripeSrc.OrderingKey = bridge.DefaultOrderingKey(verify.SchemeStripe)
	tr := &unkeyedTracer{}
	in := newIngress(t, bridge.Options{Tracer: tr, Partitions: 8}, shopSrc, byHeader, stripeSrc)

	shopifyHeader := func(id, media string, body []byte) http.Header {
		return hdr("Content-Type", media,
			"X-Shopify-Topic", "orders/create",
			"X-Shopify-Webhook-Id", id,
			"X-Shopify-Shop-Domain", "example.myshopify.com",
			"X-Shopify-Api-Version", "2025-10",
			"X-Shopify-Triggered-At", "2026-12-02T17:00:00.000000000Z",
			verify.ShopifyHeaderHMAC, signShopify(shopify.secrets[1], body))
	}
	stripeHeader := func(body []byte) http.Header {
		h := hdr("Content-Type", "application/json; charset=utf-8")
		stripe.sign(t, stripe.secrets[0], time.Now(), h, body)
		return h
	}
	xml := []byte(shopifyXMLOrder)
	for _, c := range []struct {
		name, source, id, typ string
		header                http.Header
		body                  []byte
		wantKey               string // "" = unkeyed
		wantReason            string
	}{
		{"shopify xml", "shopify", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "orders/create",
			shopifyHeader("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "application/xml", xml), xml, "", bridge.UnkeyedUnreadable},
		{"shopify xml, declared as JSON", "shopify", "wh-xml-2", "orders/create",
			shopifyHeader("wh-xml-2", "", xml), xml, "", bridge.UnkeyedUnreadable},
		{"shopify json", "shopify", "wh-json-1", "orders/create",
			shopifyHeader("wh-json-1", "application/json", []byte(`{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508"}`)),
			[]byte(`{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508"}`),
			"gid://shopify/Order/820982911946154508", ""},
		{"shopify json without the pointer", "shopify", "wh-json-2", "orders/create",
			shopifyHeader("wh-json-2", "application/json", []byte(`{"id":1}`)), []byte(`{"id":1}`), "", bridge.UnkeyedAbsent},
		{"shopify json, key not a string", "shopify", "wh-json-3", "orders/create",
			shopifyHeader("wh-json-3", "application/json", []byte(`{"admin_graphql_api_id":{"gid":1}}`)), []byte(`{"admin_graphql_api_id":{"gid":1}}`), "", bridge.UnkeyedAbsent},
		{"header key, xml body", "shopify-by-shop", "wh-xml-3", "orders/create",
			shopifyHeader("wh-xml-3", "application/xml", xml), xml, "example.myshopify.com", ""},
		{"stripe without the pointer", "stripe", "evt_balance", "balance.available",
			stripeHeader([]byte(`{"id":"evt_balance","object":"event","type":"balance.available","data":{"object":{"object":"balance"}}}`)),
			[]byte(`{"id":"evt_balance","object":"event","type":"balance.available","data":{"object":{"object":"balance"}}}`), "", bridge.UnkeyedAbsent},
		{"stripe, key null", "stripe", "evt_null", "invoice.paid",
			stripeHeader([]byte(`{"id":"evt_null","type":"invoice.paid","data":{"object":{"id":null}}}`)),
			[]byte(`{"id":"evt_null","type":"invoice.paid","data":{"object":{"id":null}}}`), "", bridge.UnkeyedAbsent},
		{"stripe keyed", "stripe", "evt_keyed", "invoice.paid",
			stripeHeader([]byte(`{"id":"evt_keyed","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`)),
			[]byte(`{"id":"evt_keyed","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`), "in_1", ""},
	} {
		before := in.hooks(t)
		a := in.post(t, c.source, c.header, c.body)
		if a.code != http.StatusAccepted {
			t.Fatalf("%s: answer %d %s, want 202", c.name, a.code, a.raw)
		}
		if n := in.hooks(t); n != before+1 {
			t.Fatalf("%s: HOOKS holds %d messages, want %d", c.name, n, before+1)
		}
		m := in.msg(t, a.body.Seq)
		if string(m.Data) != string(c.body) || m.Header.Get(stream.HeaderEventID) != c.id {
			t.Fatalf("%s: stored id %q body %q", c.name, m.Header.Get(stream.HeaderEventID), m.Data)
		}
		wantSubject := stream.HookSubject(c.source, c.typ)
		if c.wantKey != "" {
			wantSubject = stream.KeyedHookSubject(stream.Partition(c.wantKey, 8), c.source, c.typ)
		}
		if m.Subject != wantSubject || m.Header.Get(stream.HeaderOrderingKey) != c.wantKey {
			t.Fatalf("%s: stored on %s with key %q, want %s with key %q",
				c.name, m.Subject, m.Header.Get(stream.HeaderOrderingKey), wantSubject, c.wantKey)
		}
		if got := m.Header.Get(stream.HeaderUnkeyed); got != c.wantReason {
			t.Fatalf("%s: stored with %s %q, want %q", c.name, stream.HeaderUnkeyed, got, c.wantReason)
		}
		if r, ok := tr.reason(c.id); !ok || r != c.wantReason {
			t.Fatalf("%s: unkeyed reason %q (reported %v), want %q", c.name, r, ok, c.wantReason)
		}
	}

	// The id and type still need JSON where they are read from it.
	before := in.hooks(t)
	bad := []byte(`<event><id>evt_xml</id></event>`)
	a := in.post(t, "stripe", stripeHeader(bad), bad)
	wantCode(t, a, http.StatusBadRequest)
	wantMsgs(t, in, before)
}

// A source without an ordering key marks what it stores as published
// without a key (Hookbridge-Unkeyed: off), so that consumers wait for it
// once the source has a key again, whatever keyed messages came before.
// It is not a delivery that lacked its key: the tracer reports it keyed
// by nothing, and the unkeyed count does not grow.
func TestKeylessSourceMarksItsMessagesKeyOff(t *testing.T) {
	t.Parallel()
	stripe := schemeNamed(t, verify.SchemeStripe)
	keyless := stripe.source(t)
	keyless.OrderingKey = nil
	keyed := stripe.source(t)
	keyed.Name = "stripe-keyed"
	keyed.OrderingKey = bridge.DefaultOrderingKey(verify.SchemeStripe)
	tr := &unkeyedTracer{}
	in := newIngress(t, bridge.Options{Tracer: tr, Partitions: 8}, keyless, keyed)
	for _, c := range []struct {
		source, id, wantMark string
	}{
		{"stripe", "evt_off", stream.UnkeyedKeyOff},
		{"stripe-keyed", "evt_on", ""},
	} {
		body := []byte(`{"id":"` + c.id + `","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`)
		h := hdr("Content-Type", "application/json")
		stripe.sign(t, stripe.secrets[0], time.Now(), h, body)
		a := in.post(t, c.source, h, body)
		if a.code != http.StatusAccepted {
			t.Fatalf("%s: answer %d %s, want 202", c.source, a.code, a.raw)
		}
		m := in.msg(t, a.body.Seq)
		if got := m.Header.Get(stream.HeaderUnkeyed); got != c.wantMark {
			t.Fatalf("%s: stored with %s %q, want %q", c.source, stream.HeaderUnkeyed, got, c.wantMark)
		}
		if r, ok := tr.reason(c.id); !ok || r != "" {
			t.Fatalf("%s: unkeyed reason %q (reported %v), want none", c.source, r, ok)
		}
	}
}
