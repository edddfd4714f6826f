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
	s, ok := LookupScheme(scheme)
	if !ok {
		return nil, fmt.Errorf("verify: unknown scheme %q (have %v)", scheme, Schemes())
	}
	return s.sign(secret, id, ts, body, hmac)
}

// header is a header with each name (canonicalised, as Header.Set does)
// set to the value after it.
func header(kv ...string) http.Header {
	h := make(http.Header, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// unixText is a signed timestamp as the schemes send it: Unix seconds.
func unixText(ts time.Time) string { return strconv.FormatInt(ts.Unix(), 10) }
