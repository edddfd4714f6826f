package bridge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestEventIdentityPerScheme checks, for each scheme's default fields,
// where the event id and type are read and what a signed delivery gets
// when one is missing or cannot be a subject token. Every delivery is
// correctly signed, so a 400 is the identity's fault alone; the stream
// must hold exactly the accepted ones.
func TestEventIdentityPerScheme(t *testing.T) {
	t.Parallel()
	type delivery struct {
		name     string
		header   http.Header
		body     string
		code     int
		wantType string // for 202
		wantErr  string // substring of the error, for 400
	}
	cases := map[string][]delivery{
		verify.SchemeStandardWebhooks: {
			{"id header, type in body", hdr(verify.StandardHeaderID, "msg_1"), `{"type":"order.created"}`, 202, "order.created", ""},
			{"type missing", hdr(verify.StandardHeaderID, "msg_2"), `{"data":{}}`, 400, "", "missing event type"},
			{"type not a string", hdr(verify.StandardHeaderID, "msg_3"), `{"type":{"a":1}}`, 400, "", "missing event type"},
			// Free text is never refused: it is escaped into safe tokens.
			{"wildcard type", hdr(verify.StandardHeaderID, "msg_4"), `{"type":"order.>"}`, 202, "order.%3E", ""},
			{"star token", hdr(verify.StandardHeaderID, "msg_5"), `{"type":"order.*"}`, 202, "order.%2A", ""},
			{"empty token", hdr(verify.StandardHeaderID, "msg_6"), `{"type":"order..created"}`, 202, "order.%2Ecreated", ""},
			{"space in type", hdr(verify.StandardHeaderID, "msg_7"), `{"type":"order created"}`, 202, "order%20created", ""},
			{"type too long", hdr(verify.StandardHeaderID, "msg_11"), `{"type":"` + strings.Repeat("t", 256) + `"}`, 400, "", "event type longer than 255 bytes"},
			{"id with space", hdr(verify.StandardHeaderID, "msg 8"), `{"type":"order.created"}`, 400, "", "event id must be"},
			{"not json", hdr(verify.StandardHeaderID, "msg_9"), `type=order.created`, 400, "", "not valid JSON"},
			{"trailing data", hdr(verify.StandardHeaderID, "msg_10"), `{"type":"a"} {"type":"b"}`, 400, "", "trailing data"},
			// The id is part of the signed content: without it no
			// signature can be checked, so it is a 401, not a 400.
			{"id missing", http.Header{}, `{"type":"order.created"}`, 401, "", ""},
		},
		verify.SchemeGitHub: {
			{"event header + action", hdr("X-GitHub-Delivery", "d-1", "X-GitHub-Event", "issues"), `{"action":"opened"}`, 202, "issues.opened", ""},
			{"event without action", hdr("X-GitHub-Delivery", "d-2", "X-GitHub-Event", "push"), `{"ref":"refs/heads/main"}`, 202, "push", ""},
			{"ping", hdr("X-GitHub-Delivery", "d-3", "X-GitHub-Event", "ping"), `{"zen":"Design for failure."}`, 202, "ping", ""},
			{"underscore event and action", hdr("X-GitHub-Delivery", "d-4", "X-GitHub-Event", "pull_request"), `{"action":"review_requested"}`, 202, "pull_request.review_requested", ""},
			{"delivery missing", hdr("X-GitHub-Event", "issues"), `{"action":"opened"}`, 400, "", "missing event id"},
			{"event missing", hdr("X-GitHub-Delivery", "d-5"), `{"action":"opened"}`, 400, "", "missing event type"},
			{"wildcard action", hdr("X-GitHub-Delivery", "d-6", "X-GitHub-Event", "issues"), `{"action":">"}`, 202, "issues.%3E", ""},
			{"dotted action", hdr("X-GitHub-Delivery", "d-7", "X-GitHub-Event", "issues"), `{"action":"a..b"}`, 202, "issues.a.%2Eb", ""},
			{"repository_dispatch free text", hdr("X-GitHub-Delivery", "d-9", "X-GitHub-Event", "repository_dispatch"), `{"action":"deploy:staging"}`, 202, "repository_dispatch.deploy%3Astaging", ""},
			{"body not json", hdr("X-GitHub-Delivery", "d-8", "X-GitHub-Event", "issues"), `payload=%7B%7D`, 400, "", "not valid JSON"},
		},
		verify.SchemeStripe: {
			{"id and type in body", nil, `{"id":"evt_1","object":"event","type":"customer.subscription.updated"}`, 202, "customer.subscription.updated", ""},
			{"numeric id", nil, `{"id":12345,"type":"charge.failed"}`, 202, "charge.failed", ""},
			{"id missing", nil, `{"type":"charge.failed"}`, 400, "", "missing event id"},
			{"type missing", nil, `{"id":"evt_2"}`, 400, "", "missing event type"},
			{"id not printable", nil, `{"id":"evt\u0000","type":"charge.failed"}`, 400, "", "event id must be"},
			{"id too long", nil, `{"id":"` + strings.Repeat("x", 256) + `","type":"charge.failed"}`, 400, "", "event id must be"},
			{"type with wildcard", nil, `{"id":"evt_3","type":"charge.*"}`, 202, "charge.%2A", ""},
		},
		verify.SchemeShopify: {
			{"topic with slash", hdr("X-Shopify-Webhook-Id", "w-1", "X-Shopify-Topic", "orders/create"), `{"id":1}`, 202, "orders.create", ""},
			{"nested topic", hdr("X-Shopify-Webhook-Id", "w-2", "X-Shopify-Topic", "app/uninstalled"), `{}`, 202, "app.uninstalled", ""},
			{"non-JSON body is fine", hdr("X-Shopify-Webhook-Id", "w-3", "X-Shopify-Topic", "orders/paid"), `<order/>`, 202, "orders.paid", ""},
			{"id missing", hdr("X-Shopify-Topic", "orders/create"), `{}`, 400, "", "missing event id"},
			{"topic missing", hdr("X-Shopify-Webhook-Id", "w-4"), `{}`, 400, "", "missing event type"},
			{"topic leading slash", hdr("X-Shopify-Webhook-Id", "w-5", "X-Shopify-Topic", "/orders"), `{}`, 202, "%2Forders", ""},
			{"topic wildcard", hdr("X-Shopify-Webhook-Id", "w-6", "X-Shopify-Topic", "orders/>"), `{}`, 202, "orders.%3E", ""},
		},
		verify.SchemeSlack: {
			{"event_id and event.type", nil, `{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}`, 202, "message", ""},
			{"event_id missing", nil, `{"type":"event_callback","event":{"type":"message"}}`, 400, "", "missing event id"},
			{"event.type missing", nil, `{"type":"event_callback","event_id":"Ev2","event":{}}`, 400, "", "missing event type"},
			{"event not an object", nil, `{"type":"event_callback","event_id":"Ev3","event":"message"}`, 400, "", "missing event type"},
			{"free-text event type", nil, `{"type":"event_callback","event_id":"Ev4","event":{"type":"message changed"}}`, 202, "message%20changed", ""},
		},
		verify.SchemeHMAC: {
			{"id and type in body", nil, `{"id":"h-1","type":"invoice.paid"}`, 202, "invoice.paid", ""},
			{"id missing", nil, `{"type":"invoice.paid"}`, 400, "", "missing event id"},
			{"type missing", nil, `{"id":"h-2"}`, 400, "", "missing event type"},
			{"long type is shortened", nil, `{"id":"h-3","type":"` + strings.Repeat("a.", 100) + `a"}`, 202, stream.TypeSubject(strings.Repeat("a.", 100) + "a"), ""},
			{"type too long", nil, `{"id":"h-4","type":"` + strings.Repeat("a", 256) + `"}`, 400, "", "event type longer than 255 bytes"},
		},
	}
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			in := newIngress(t, bridge.Options{}, sc.source(t))
			ds := cases[sc.name]
			if len(ds) == 0 {
				t.Fatal("no cases")
			}
			var accepted uint64
			for _, d := range ds {
				h := d.header.Clone()
				if h == nil {
					h = http.Header{}
				}
				body := []byte(d.body)
				sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
				a := in.post(t, sc.name, h, body)
				if a.code != d.code {
					t.Errorf("%s: answer %d %s, want %d", d.name, a.code, a.raw, d.code)
					continue
				}
				switch d.code {
				case http.StatusAccepted:
					accepted++
					if got := in.msg(t, a.body.Seq).Subject; got != "hooks."+sc.name+"."+d.wantType {
						t.Errorf("%s: subject %q, want type %q", d.name, got, d.wantType)
					}
				case http.StatusBadRequest:
					if !strings.Contains(a.body.Error, d.wantErr) {
						t.Errorf("%s: error %q, want it to mention %q", d.name, a.body.Error, d.wantErr)
					}
				}
			}
			wantMsgs(t, in, accepted)
		})
	}
}

// TestCustomFields configures the id and type locations explicitly, as
// the event_id/event_type keys of a source do.
func TestCustomFields(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	src := sc.source(t)
	src.EventID = bridge.Field{Pointer: "/meta/id"}
	src.EventType = bridge.Field{Header: "X-Kind", Suffix: "/meta/sub~1kind"}
	in := newIngress(t, bridge.Options{}, src)

	body := []byte(`{"meta":{"id":"c-1","sub/kind":"done"}}`)
	h := hdr("X-Kind", "job")
	sc.sign(t, sc.secrets[0], in.clock.Now(), h, body)
	a := in.post(t, sc.name, h, body)
	wantCode(t, a, http.StatusAccepted)
	if got := in.msg(t, a.body.Seq).Subject; got != "hooks.github.job.done" {
		t.Fatalf("subject %q, want hooks.github.job.done", got)
	}
	wantMsgs(t, in, 1)
}

// TestFieldValidation refuses impossible field configurations at New.
func TestFieldValidation(t *testing.T) {
	t.Parallel()
	sc := schemeNamed(t, verify.SchemeGitHub)
	for name, f := range map[string]bridge.Field{
		"none":              {},
		"both":              {Header: "X-Id", Pointer: "/id"},
		"relative pointer":  {Pointer: "id"},
		"relative suffix":   {Header: "X-Id", Suffix: "action"},
		"suffix only":       {Suffix: "/action"},
		"pointer and blank": {Pointer: "/id", Header: ""},
	} {
		src := sc.source(t)
		src.EventType = f
		_, err := bridge.New(nil, bridge.Options{Sources: []bridge.Source{src}})
		if valid := name == "pointer and blank"; (err == nil) != valid {
			t.Errorf("%s: New error %v, want valid=%v", name, err, valid)
		}
	}
}
