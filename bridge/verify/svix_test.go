package verify

import (
	"net/http"
	"testing"
	"time"
)

// TestStandardWebhooksSvixHeaders: Svix sends the Standard Webhooks
// signature under svix-id/-timestamp/-signature. Its own library's
// signing vector (github.com/svix/svix-webhooks go/webhook_test.go,
// TestWebhookSign: the same values as the Standard Webhooks vector) is
// accepted under those names, the two sets are never mixed, and when a
// request carries any webhook-* header that set is the one checked.
func TestStandardWebhooksSvixHeaders(t *testing.T) {
	v := mustNew(t, SchemeStandardWebhooks, []string{swSecret}, Options{})
	ts := "1614265330"
	at := unix(swTS)
	svix := func(id, ts, sig string) http.Header {
		return hdr(SvixHeaderID, id, SvixHeaderTimestamp, ts, SvixHeaderSignature, sig)
	}
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	forged := flipAt(swSig, 3, 'A')
	runChecks(t, []string{swSecret}, []check{
		{"svix vector", v, svix(swID, ts, swSig), swBody, at, nil, ""},
		{"svix, lower-case names as sent", v, http.Header{"Svix-Id": {swID}, "Svix-Timestamp": {ts}, "Svix-Signature": {swSig}}, swBody, at, nil, ""},
		{"svix tampered body", v, svix(swID, ts, swSig), swBody + " ", at, ErrBadSignature, "mismatch"},
		{"svix stale", v, svix(swID, ts, swSig), swBody, at.Add(time.Hour), ErrStaleTimestamp, "stale"},
		{"svix missing id", v, hdr(SvixHeaderTimestamp, ts, SvixHeaderSignature, swSig), swBody, at, ErrMissingSignature, "missing"},
		{"both sets, both genuine", v, with(svix(swID, ts, swSig), StandardHeaderID, swID, StandardHeaderTimestamp, ts, StandardHeaderSignature, swSig), swBody, at, nil, ""},
		// Never a mix: the webhook-* set is incomplete, and svix-*
		// headers do not fill it in.
		{"mixed sets", v, hdr(StandardHeaderID, swID, SvixHeaderTimestamp, ts, SvixHeaderSignature, swSig), swBody, at, ErrMissingSignature, "missing"},
		// A webhook-* header present means that set is checked, so a
		// forged webhook-* signature fails even beside a genuine svix-*.
		{"forged webhook set beside a genuine svix set", v, with(svix(swID, ts, swSig), StandardHeaderID, swID, StandardHeaderTimestamp, ts, StandardHeaderSignature, forged), swBody, at, ErrBadSignature, "mismatch"},
	})
	if got := StandardID(svix("msg_svix", ts, swSig)); got != "msg_svix" {
		t.Errorf("StandardID(svix set) = %q", got)
	}
	if got := StandardID(with(svix("msg_svix", ts, swSig), StandardHeaderID, "msg_std")); got != "msg_std" {
		t.Errorf("StandardID(both sets) = %q, want the webhook-id", got)
	}
}
