package verify

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// SignHeaders returns the headers a sender using scheme adds to a
// delivery of body signed with secret at ts: the signature, and the
// timestamp for the schemes that sign one. For standard-webhooks it also
// sets the event id, which that scheme signs; the other schemes carry the
// event id where the source's configuration says, so id is not used for
// them. hmac is only for scheme "hmac" and must be zero otherwise. It is
// the one signer for the send and selftest commands, the load tool and
// the test kit (hookbridgetest).
func SignHeaders(scheme, secret, id string, ts time.Time, body []byte, hmac HMACConfig) (http.Header, error) {
	if scheme != SchemeHMAC && !hmac.isZero() {
		return nil, fmt.Errorf("verify: HMAC options given for scheme %q; they apply to %q only", scheme, SchemeHMAC)
	}
	unix := strconv.FormatInt(ts.Unix(), 10)
	h := http.Header{}
	switch scheme {
	case SchemeStandardWebhooks:
		sig, err := SignStandard(secret, id, ts, body)
		if err != nil {
			return nil, err
		}
		h.Set(StandardHeaderID, id)
		h.Set(StandardHeaderTimestamp, unix)
		h.Set(StandardHeaderSignature, sig)
	case SchemeGitHub:
		h.Set(GitHubHeaderSignature, SignGitHub(secret, body))
	case SchemeStripe:
		h.Set(StripeHeaderSignature, SignStripe(secret, ts, body))
	case SchemeShopify:
		h.Set(ShopifyHeaderHMAC, SignShopify(secret, body))
	case SchemeSlack:
		h.Set(SlackHeaderTimestamp, unix)
		h.Set(SlackHeaderSignature, SignSlack(secret, ts, body))
	case SchemeHMAC:
		spec, err := hmac.compile()
		if err != nil {
			return nil, err
		}
		sig, err := SignHMAC(secret, hmac, ts, body)
		if err != nil {
			return nil, err
		}
		h.Set(spec.header, sig)
		if spec.tsHeader != "" {
			h.Set(spec.tsHeader, unix)
		}
	default:
		return nil, fmt.Errorf("verify: unknown scheme %q (have %v)", scheme, Schemes())
	}
	return h, nil
}
