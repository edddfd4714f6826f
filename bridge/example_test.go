package bridge_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// The ingress on its own, in front of an embedded JetStream: a Stripe
// source with the scheme's default event id, type and ordering key. A
// signed delivery is answered 202 once JetStream stored it, and is found
// in HOOKS on its key's partition, with the event id in Nats-Msg-Id.
// Stripe's retry of it is a duplicate, and a delivery whose body was
// changed after signing is refused: the stream still holds one message.
func ExampleHandler() {
	hookbridgetest.Example(func(t testing.TB) {
		js := hookbridgetest.NATS(t)
		js.EnsureHooks(t) // serve creates the streams at start; here the kit does

		const secret = "whsec_test_d5Ai7jDrPJzkbqEs"
		v, err := verify.New(verify.SchemeStripe, []string{secret}, verify.Options{})
		if err != nil {
			t.Fatal(err)
		}
		id, typ := bridge.DefaultFields(verify.SchemeStripe)
		h, err := bridge.New(js.JS, bridge.Options{Sources: []bridge.Source{{
			Name: "billing", Verifier: v, EventID: id, EventType: typ,
			OrderingKey: bridge.DefaultOrderingKey(verify.SchemeStripe),
		}}})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(bridge.Pattern, h)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)

		send := func(what string, req *http.Request) bridge.Response {
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var answer bridge.Response
			if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
				t.Fatal(err)
			}
			// An answer holds an event id, or the error of a refusal.
			fmt.Println(what+":", resp.StatusCode, answer.Status, answer.EventID+answer.Error)
			return answer
		}
		url := srv.URL + "/webhooks/billing"
		body := `{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`
		signed := func() *http.Request {
			return hookbridgetest.SignedRequest(t, url, hookbridgetest.Delivery{Scheme: verify.SchemeStripe, Secret: secret, Body: []byte(body)})
		}

		answer := send("signed", signed())
		hooks, err := js.JS.Stream(t.Context(), "HOOKS")
		if err != nil {
			t.Fatal(err)
		}
		msg, err := hooks.GetMsg(t.Context(), answer.Seq)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("stored on", msg.Subject, "as", msg.Header.Get("Nats-Msg-Id"), "with the body as sent:", string(msg.Data) == body)

		send("retried", signed())
		tampered, err := http.NewRequest(http.MethodPost, url, strings.NewReader(strings.Replace(body, "in_1", "in_2", 1)))
		if err != nil {
			t.Fatal(err)
		}
		tampered.Header = signed().Header
		send("tampered", tampered)
		fmt.Println("messages in HOOKS:", js.StreamMsgs(t, "HOOKS"))
	})
	// Output:
	// signed: 202 accepted evt_1
	// stored on hookp.6.billing.invoice.paid as billing:evt_1 with the body as sent: true
	// retried: 200 duplicate evt_1
	// tampered: 401 error signature: mismatch
	// messages in HOOKS: 1
}
