package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/bridge/verify"
)

// sendCmd sends one signed webhook, as a sender would.
type sendCmd struct {
	Source string `help:"Source to send as." default:"demo"`
	Type   string `help:"Event type, e.g. order.created." required:""`
	Data   string `help:"JSON object for the body's data field." default:"{}"`
	ID     string `help:"Event id (default: a random msg_… id)."`
	// Timestamp is fixed by default: the body is then a function of the
	// type, the data and this flag only, so sending the same --id again
	// is an exact repeat (200 duplicate) however much later it is sent.
	// The signature's own timestamp header is always the current time.
	Timestamp string `help:"The body's timestamp field (RFC 3339). The default is fixed, so the same --id, --type and --data make the same body and a repeat answers 200 duplicate." default:"1970-01-01T00:00:00Z"`
	URL       string `help:"Base URL of the ingress (default: http://<http-addr>)."`
	httpFlags
}

// Run implements the send command.
func (c *sendCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	src := cfg.Source(c.Source)
	if src == nil {
		return fmt.Errorf("send: source %q is not configured", c.Source)
	}
	if src.Scheme != verify.SchemeStandardWebhooks {
		return fmt.Errorf("send: source %q uses %s; send signs Standard Webhooks only", c.Source, src.Scheme)
	}
	body, err := c.body()
	if err != nil {
		return err
	}
	id := c.ID
	if id == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		id = "msg_" + hex.EncodeToString(b)
	}
	req, err := standardRequest(ctx, c.baseURL(cfg)+"/webhooks/"+c.Source, src.ResolvedSecrets()[0], id, time.Now(), body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Fprintf(rt.stdout, "%s %s\n%s", resp.Status, id, out)
	// Like curl --fail: a script can tell an accepted (or duplicate)
	// delivery from a refused one by the exit status alone.
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return fmt.Errorf("send: %s", resp.Status)
	}
	return nil
}

// body is the Standard Webhooks body send posts: the same flags always
// give the same bytes.
func (c *sendCmd) body() ([]byte, error) {
	if !json.Valid([]byte(c.Data)) {
		return nil, fmt.Errorf("send: --data is not valid JSON")
	}
	if _, err := time.Parse(time.RFC3339, c.Timestamp); err != nil {
		return nil, fmt.Errorf("send: --timestamp %q is not an RFC 3339 time: %w", c.Timestamp, err)
	}
	body, err := json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{c.Type, c.Timestamp, json.RawMessage(c.Data)})
	if err != nil {
		return nil, fmt.Errorf("send: encode body: %w", err)
	}
	return body, nil
}

// standardRequest builds the POST of a JSON body to url that a Standard
// Webhooks sender makes, signed with secret at ts with id as the event id
// (send and selftest). Tests build theirs with hookbridgetest, which the
// product does not import.
func standardRequest(ctx context.Context, url, secret, id string, ts time.Time, body []byte) (*http.Request, error) {
	h, err := verify.SignHeaders(verify.SchemeStandardWebhooks, secret, id, ts, body, verify.HMACConfig{})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

func (c *sendCmd) baseURL(cfg app.Config) string {
	if c.URL != "" {
		return strings.TrimSuffix(c.URL, "/")
	}
	return "http://" + cfg.HTTPAddr
}
