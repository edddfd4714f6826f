package bridge

import (
	"net/http"
	"testing"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// BenchmarkIdentify is the ingress's own reading of a verified delivery:
// finding the event id and type of a Stripe-shaped body (id and type in
// the JSON, about 1 KiB with nested objects) and of a Standard Webhooks
// one (id in a header, type in the body).
func BenchmarkIdentify(b *testing.B) {
	stripe := []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2022-11-15","created":1686089970,` +
		`"data":{"object":{"id":"seti_1NG8Du2eZvKYlo2C9XMqbR0x","object":"setup_intent","application":null,"automatic_payment_methods":null,` +
		`"cancellation_reason":null,"client_secret":"seti_1NG8Du2eZvKYlo2C9XMqbR0x_secret_O2CdhLwGFh2Aej7bCY7qp8jlIuyR8DJ",` +
		`"created":1686089970,"customer":null,"description":null,"flow_directions":null,"last_setup_error":null,"latest_attempt":null,` +
		`"livemode":false,"mandate":null,"metadata":{},"next_action":null,"on_behalf_of":null,"payment_method":"pm_1NG8Du2eZvKYlo2CYzzldNr7",` +
		`"payment_method_options":{"acss_debit":{"currency":"cad","mandate_options":{"interval_description":"First day of every month",` +
		`"payment_schedule":"interval","transaction_type":"personal"},"verification_method":"automatic"}},"payment_method_types":["acss_debit"],` +
		`"single_use_mandate":null,"status":"requires_confirmation","usage":"off_session"}},"livemode":false,"pending_webhooks":0,` +
		`"request":{"id":null,"idempotency_key":null},"type":"setup_intent.created"}`)
	standard := []byte(`{"type":"order.created","timestamp":"2026-11-29T12:00:00Z","data":{"order_id":"o-1","amount_cents":1000,"currency":"EUR"}}`)
	cases := []struct {
		name   string
		scheme string
		header http.Header
		body   []byte
		id     string
	}{
		{"stripe", verify.SchemeStripe, http.Header{}, stripe, "evt_1NG8Du2eZvKYlo2CUI79vXWy"},
		{"standard-webhooks", verify.SchemeStandardWebhooks, http.Header{"Webhook-Id": {"msg_1"}}, standard, "msg_1"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			idf, typf := DefaultFields(c.scheme)
			src := Source{Name: "s", EventID: idf, EventType: typf}
			b.ReportAllocs()
			for b.Loop() {
				ident, err := identify(src, c.header, "application/json", c.body)
				if err != nil || ident.id != c.id {
					b.Fatalf("identify = %q, %v", ident.id, err)
				}
			}
		})
	}
}
