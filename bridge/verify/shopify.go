package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"
)

// SchemeShopify is Shopify's scheme: a base64 HMAC-SHA256 of the body in
// X-Shopify-Hmac-Sha256, the event id and topic in its own headers.
const SchemeShopify = "shopify"

func init() {
	register(&Scheme{
		name:     SchemeShopify,
		rank:     40,
		verifier: func(secrets []string, _ Options) (Verifier, error) { return built(NewShopify(secrets)) },
		owns:     is[*Shopify],
		sign: func(secret, _ string, _ time.Time, body []byte, _ HMACConfig) (http.Header, error) {
			return header(ShopifyHeaderHMAC, SignShopify(secret, body)), nil
		},
		// No timestamp is signed: see Shopify.
		id:  Location{Header: "X-Shopify-Webhook-Id"},
		typ: Location{Header: "X-Shopify-Topic"},
		// The resource's GraphQL id ("gid://shopify/Order/1") is unique
		// across resource kinds, unlike the numeric id.
		key: &Location{Pointer: "/admin_graphql_api_id"},
	})
}

// ShopifyHeaderHMAC carries Shopify's base64 HMAC-SHA256 of the body.
const ShopifyHeaderHMAC = "X-Shopify-Hmac-Sha256"

// Shopify verifies Shopify webhooks: base64 HMAC-SHA256 of the raw body
// with the app's client secret. Shopify signs no timestamp, so replays
// cannot be refused here; dedupe on X-Shopify-Webhook-Id downstream.
type Shopify struct {
	keys [][]byte
}

// NewShopify returns a verifier that accepts a signature made by any of
// secrets (several secrets allow rotation). Secrets are used byte for byte.
func NewShopify(secrets []string) (*Shopify, error) {
	keys, err := rawKeys("shopify", secrets)
	if err != nil {
		return nil, err
	}
	return &Shopify{keys: keys}, nil
}

// Verify implements [Verifier]. now is unused: Shopify signs no timestamp.
func (v *Shopify) Verify(h http.Header, body []byte, _ time.Time) error {
	sigs := signatureValues(h, ShopifyHeaderHMAC)
	if len(sigs) == 0 {
		return fmt.Errorf("shopify: %w", ErrMissingSignature)
	}
	var got [][]byte
	for _, sig := range sigs {
		if raw, ok := decodeBase64(sig, sha256.Size); ok {
			got = append(got, raw)
		}
	}
	if len(got) == 0 {
		return fmt.Errorf("shopify: not a base64 SHA-256: %w", ErrMalformedSignature)
	}
	if !anyMatch(got, macsOf(sha256.New, v.keys, body)) {
		return fmt.Errorf("shopify: %w", ErrBadSignature)
	}
	return nil
}

// SignShopify returns the X-Shopify-Hmac-Sha256 value Shopify would send
// for body, for senders and tests.
func SignShopify(secret string, body []byte) string {
	return base64.StdEncoding.EncodeToString(macOf(sha256.New, []byte(secret), body))
}
