package verify_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// A sender and a receiver of Stripe webhooks with this package alone, and
// no I/O: the sender signs the delivery with SignHeaders, the receiver's
// verifier (built by New from the endpoint's secret) accepts it, and
// refuses it once the body is changed or once it arrives later than the
// tolerance allows.
func Example() {
	const secret = "whsec_test_d5Ai7jDrPJzkbqEs"
	body := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`)
	signedAt := time.Unix(1_700_000_000, 0)

	header, err := verify.SignHeaders(verify.SchemeStripe, secret, "", signedAt, body, verify.HMACConfig{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Stripe-Signature:", header.Get(verify.StripeHeaderSignature))

	v, err := verify.New(verify.SchemeStripe, []string{secret}, verify.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("as sent:", v.Verify(header, body, signedAt.Add(2*time.Second)))

	tampered := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_2"}}}`)
	err = v.Verify(header, tampered, signedAt.Add(2*time.Second))
	fmt.Println("tampered body:", verify.Reason(err), errors.Is(err, verify.ErrBadSignature))

	err = v.Verify(header, body, signedAt.Add(time.Hour))
	fmt.Println("an hour later:", verify.Reason(err), errors.Is(err, verify.ErrStaleTimestamp))
	// Output:
	// Stripe-Signature: t=1700000000,v1=6d17ffeb5ef6c4bba050d08779ad8afa0536c7001b164a35e19447150194ccf4
	// as sent: <nil>
	// tampered body: mismatch true
	// an hour later: stale true
}

// What a scheme's descriptor says beyond its signature: how long a signed
// timestamp stays valid (0: the scheme signs none, and only the event id
// refuses a replay), where the senders put the event id, and where they
// name the entity an event is about. (docs/INGRESS.md tabulates every
// scheme.)
func ExampleLookupScheme() {
	where := func(l verify.Location) string {
		if l.Header != "" {
			return "header " + l.Header
		}
		return "body " + l.Pointer
	}
	for _, name := range []string{verify.SchemeStandardWebhooks, verify.SchemeGitHub, verify.SchemeStripe, verify.SchemeShopify} {
		s, _ := verify.LookupScheme(name)
		key := "none"
		if k, ok := s.OrderingKey(); ok {
			key = where(k)
		}
		fmt.Printf("%-17s tolerance %-4v id %-27s key %s\n", s.Name(), s.Tolerance(verify.HMACConfig{}), where(s.EventID()), key)
	}
	// Output:
	// standard-webhooks tolerance 5m0s id header Webhook-Id           key none
	// github            tolerance 0s   id header X-GitHub-Delivery    key none
	// stripe            tolerance 5m0s id body /id                    key body /data/object/id
	// shopify           tolerance 0s   id header X-Shopify-Webhook-Id key body /admin_graphql_api_id
}
