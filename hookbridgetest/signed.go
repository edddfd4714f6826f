package hookbridgetest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// Delivery is one webhook delivery as a sender makes it.
type Delivery struct {
	// Scheme is the source's signature scheme (verify.Scheme*); empty
	// means Standard Webhooks.
	Scheme string
	Secret string
	// ID is the event id. Standard Webhooks signs it (webhook-id); the
	// other schemes carry it where the source's configuration says, so
	// put it in Header or Body for them.
	ID string
	// Time is the signing time; zero means now. A time outside the
	// source's tolerance tests the replay window.
	Time time.Time
	Body []byte
	// HMAC configures scheme "hmac" only.
	HMAC verify.HMACConfig
	// Header holds extra headers (an event type or id header, say);
	// they do not override the signature headers.
	Header http.Header
}

// NewSignedRequest builds the POST of d to url, signed as d's scheme
// signs (with verify.SignHeaders, the one signer), with a JSON content
// type. It does not need a test, so it can be called from goroutines and
// load loops.
func NewSignedRequest(ctx context.Context, url string, d Delivery) (*http.Request, error) {
	scheme := d.Scheme
	if scheme == "" {
		scheme = verify.SchemeStandardWebhooks
	}
	ts := d.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	h, err := verify.SignHeaders(scheme, d.Secret, d.ID, ts, d.Body, d.HMAC)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for k, vs := range d.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// SignedRequest is [NewSignedRequest] that fails the test on error.
func SignedRequest(t testing.TB, url string, d Delivery) *http.Request {
	t.Helper()
	req, err := NewSignedRequest(context.Background(), url, d)
	if err != nil {
		t.Fatalf("signed request: %v", err)
	}
	return req
}
