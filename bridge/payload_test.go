package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// sizedBody is a Standard Webhooks body of exactly n bytes whose type is
// 255 bytes that must be percent-encoded in the header (the longest
// header hookbridge writes).
func sizedBody(t *testing.T, n int) []byte {
	t.Helper()
	head := `{"type":"` + strings.Repeat(`\u0001`, stream.MaxEventTypeBytes) + `","pad":"`
	tail := `"}`
	if n < len(head)+len(tail) {
		t.Fatal("body too small")
	}
	return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
}

// postStandard signs body for the Standard Webhooks source "sw" with id
// and sends it, declaring its length or chunked.
func postStandard(t *testing.T, url, secret, id string, body []byte, chunked bool) int {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // no length known: sent chunked
	}
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/sw", rd)
	if err != nil {
		t.Fatal(err)
	}
	if chunked && req.ContentLength != 0 {
		t.Fatal("request would declare its length")
	}
	now := time.Now()
	sig, err := verify.SignStandard(secret, id, now, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(verify.StandardHeaderID, id)
	req.Header.Set(verify.StandardHeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(verify.StandardHeaderSignature, sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		t.Logf("%d bytes, chunked=%v: %d %s", len(body), chunked, resp.StatusCode, bytes.TrimSpace(raw))
	}
	return resp.StatusCode
}

// TestBodyAtMaxBodyBytesIsStored: a body of exactly max_body_bytes, with
// the longest id and type header, is stored (202) whether its length is
// declared or it is chunked, on an embedded server sized the way serve
// sizes it, and on the default server with the default limit. One byte
// more is 413, never 503. (Before, the headers pushed such bodies over
// max_payload: 503, retried forever.)
func TestBodyAtMaxBodyBytesIsStored(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cases := []struct {
		name       string
		maxBody    int64
		maxPayload int64 // 0: the embedded default
	}{
		{"max_body_bytes 1 MiB, server sized by RequiredMaxPayload", 1 << 20, bridge.RequiredMaxPayload(1 << 20)},
		{"defaults", 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			js := inProcessJetStream(t, c.maxPayload)
			v, err := verify.NewStandardWebhooks([]string{secret}, 0)
			if err != nil {
				t.Fatal(err)
			}
			idf, typf := bridge.DefaultFields(verify.SchemeStandardWebhooks)
			h, err := bridge.New(js, bridge.Options{MaxBodyBytes: c.maxBody, Logger: quietLogger(),
				Sources: []bridge.Source{{Name: "sw", Verifier: v, EventID: idf, EventType: typf}}})
			if err != nil {
				t.Fatal(err)
			}
			baseURL := serveHTTP(t, h)

			limit := c.maxBody
			if limit == 0 {
				limit = bridge.DefaultMaxBodyBytes
			}
			longID := func(tag string) string { return tag + strings.Repeat("i", 255-len(tag)) }
			exact := sizedBody(t, int(limit))
			for _, chunked := range []bool{false, true} {
				if code := postStandard(t, baseURL, secret, longID(fmt.Sprintf("exact-%v-", chunked)), exact, chunked); code != http.StatusAccepted {
					t.Fatalf("body of exactly %d bytes (chunked=%v): answer %d, want 202", limit, chunked, code)
				}
			}
			over := sizedBody(t, int(limit)+1)
			for _, chunked := range []bool{false, true} {
				if code := postStandard(t, baseURL, secret, longID(fmt.Sprintf("over-%v-", chunked)), over, chunked); code != http.StatusRequestEntityTooLarge {
					t.Fatalf("body of %d bytes (chunked=%v): answer %d, want 413", limit+1, chunked, code)
				}
			}
			s, err := js.Stream(context.Background(), stream.Hooks)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 2 {
				t.Fatalf("HOOKS holds %d messages, want 2", info.State.Msgs)
			}
			m, err := s.GetMsg(context.Background(), 1)
			if err != nil || !bytes.Equal(m.Data, exact) {
				t.Fatalf("stored body differs (%v)", err)
			}
		})
	}
}

// TestNewRefusesTooSmallMaxPayload: a max_body_bytes the server's
// max_payload cannot hold with the headers is refused at start, naming
// both numbers, instead of answering 503 for the largest bodies.
func TestNewRefusesTooSmallMaxPayload(t *testing.T) {
	t.Parallel()
	js := hookbridgetest.NATS(t) // the NATS default max_payload, 1 MiB
	sc := schemeNamed(t, verify.SchemeGitHub)
	_, err := bridge.New(js.JS, bridge.Options{MaxBodyBytes: 1 << 20, Sources: []bridge.Source{sc.source(t)}})
	if err == nil {
		t.Fatal("New accepted max_body_bytes 1 MiB on a server with max_payload 1 MiB")
	}
	for _, want := range []string{"max_body_bytes 1048576", "at least 1056768", "allows 1048576"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := bridge.New(js.JS, bridge.Options{MaxBodyBytes: bridge.DefaultMaxBodyBytes, Sources: []bridge.Source{sc.source(t)}}); err != nil {
		t.Fatalf("the default limit on the default server: %v", err)
	}
}
