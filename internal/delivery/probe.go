package delivery

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// TestResult is the answer to a test event.
type TestResult struct {
	// EventID is the test event's webhook-id.
	EventID string `json:"event_id"`
	// Status is the HTTP status (0: no answer); Class the outcome's
	// class ([StatusClass]); Success whether it was a 2xx in time.
	Status  int    `json:"status,omitempty"`
	Class   string `json:"class"`
	Success bool   `json:"success"`
	// Latency is from the request's start to its answer's headers.
	Latency time.Duration `json:"latency"`
	// Excerpt is the start of the answer's body (at most ExcerptBytes).
	Excerpt string `json:"excerpt,omitempty"`
}

// SendTest posts one signed test event (type hookbridge.test) to e, with
// e's secrets, headers, timeout and address rules, and returns the
// answer. It is not an event of EVENTS: nothing is recorded or retried.
// client nil is [NewClient] of e.
func SendTest(ctx context.Context, e Endpoint, sign Signer, client *http.Client) TestResult {
	e = e.WithDefaults()
	if client == nil {
		client = NewClient(e)
	}
	id := "test_" + nuid.Next()
	body, _ := json.Marshal(map[string]any{ // plain data: never fails
		"type":      "hookbridge.test",
		"timestamp": time.Now().UTC().Format(time.RFC3339),
		"data":      map[string]string{"endpoint": e.Name},
	})
	res := post(ctx, &e, client, sign, payload{id: id, body: body, header: nats.Header{}})
	return TestResult{EventID: id, Status: res.status, Class: StatusClass(res.status, res.class), Success: res.success(),
		Latency: res.duration, Excerpt: res.excerpt}
}
