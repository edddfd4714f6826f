package delivery

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/internal/tracing"
)

// Signer returns the Standard Webhooks signature ("v1,<base64>") of one
// delivery with one secret. The application passes verify.SignStandard,
// the project's one signer (internal packages may not import bridge).
type Signer func(secret, id string, ts time.Time, body []byte) (string, error)

// Standard Webhooks header names, as bridge/verify spells them.
const (
	HeaderID        = "Webhook-Id"
	HeaderTimestamp = "Webhook-Timestamp"
	HeaderSignature = "Webhook-Signature"
)

const userAgent = "hookbridge-delivery/1"

// maxRetryAfter caps a Retry-After so a receiver cannot park an event
// beyond the longest step of the default schedule.
const maxRetryAfter = 10 * time.Hour

// result is one attempt's outcome.
type result struct {
	status     int
	class      string
	excerpt    string
	retryAfter time.Duration
	duration   time.Duration
}

func (r result) success() bool { return r.status >= 200 && r.status < 300 && r.class == "" }

// payload is what one delivery sends: the event's id (the webhook-id),
// its body and the message headers the request uses.
type payload struct {
	id     string
	body   []byte
	header nats.Header
}

// post sends one signed request. ctx carries the attempt's span, whose
// trace context goes to the endpoint in traceparent; without one, the
// trace context the event carried is passed on as it is.
func post(ctx context.Context, e *Endpoint, client *http.Client, sign Signer, p payload) result {
	ts := time.Now()
	sigs := make([]string, 0, len(e.Secrets))
	for _, secret := range e.Secrets {
		sig, err := sign(secret, p.id, ts, p.body)
		if err != nil {
			// Validate checked the secrets' form; this is a bug, not input.
			return result{class: "sign"}
		}
		sigs = append(sigs, sig)
	}
	actx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, e.URL, bytes.NewReader(p.body))
	if err != nil {
		return result{class: "request"}
	}
	for k, v := range e.Headers {
		req.Header.Set(k, v)
	}
	ct := p.header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("User-Agent", userAgent)
	if tc := tracing.MapHeaders(ctx); tc != nil {
		for k, v := range tc {
			req.Header.Set(k, v)
		}
	} else if tp := p.header.Get("traceparent"); tp != "" {
		req.Header.Set("traceparent", tp)
		if ts := p.header.Get("tracestate"); ts != "" {
			req.Header.Set("tracestate", ts)
		}
	}
	req.Header.Set(HeaderID, p.id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, strings.Join(sigs, " "))
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return result{class: errorClass(actx, err), duration: time.Since(start)}
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode, excerpt: readExcerpt(resp.Body)}
	res.duration = time.Since(start)
	if actx.Err() != nil {
		// The answer came but its body did not within the timeout.
		res.class = classTimeout
	}
	if !res.success() && res.class == "" {
		res.class = classStatus
	}
	res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return res
}

// nextDelay is the wait before attempt n+1 after attempt n failed with
// res: the schedule's step, or a longer Retry-After of a 429 or 503.
func nextDelay(e *Endpoint, n int, res result) time.Duration {
	d := e.Retry[min(n, len(e.Retry)-1)]
	if res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable {
		d = max(d, min(res.retryAfter, maxRetryAfter))
	}
	return d
}

// parseRetryAfter reads seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// eventID is the webhook-id: the message's Nats-Msg-Id, which the relay
// sets to the outbox message's id, so every attempt and every redelivery
// carries the same one. A message published without one (not by the
// relay) gets one from its stream sequence, stable as well.
func eventID(h nats.Header, seq uint64) string {
	if id := h.Get(nats.MsgIdHdr); id != "" {
		return id
	}
	return "evt_seq_" + strconv.FormatUint(seq, 10)
}

// keptHeaders are the message headers a request uses, which a dead
// letter keeps for its requeue.
var keptHeaders = []string{"Content-Type", "traceparent", "tracestate"}

func headerMap(h nats.Header) map[string]string {
	out := map[string]string{}
	for _, k := range keptHeaders {
		if v := h.Get(k); v != "" {
			out[k] = v
		}
	}
	return out
}

func natsHeader(m map[string]string) nats.Header {
	h := nats.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}
