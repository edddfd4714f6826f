package bridge_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// fixture is one real delivery shape, in testdata/interop/*.json: the
// request exactly as the provider sends it (header lines in order,
// repeated names kept, signatures computed outside this code base with
// the provider's published algorithm) and what must come of it, from the
// HTTP answer to the Event a handler gets.
type fixture struct {
	Description string `json:"description"`
	Source      struct {
		Scheme  string   `json:"scheme"`
		Secrets []string `json:"secrets"`
		// EventID and EventType override the scheme's defaults.
		EventID   *bridge.Field `json:"event_id"`
		EventType *bridge.Field `json:"event_type"`
	} `json:"source"`
	// Now is the ingress clock, Unix seconds (0: the real clock).
	Now     int64 `json:"now"`
	Request struct {
		Headers [][2]string `json:"headers"`
		Body    string      `json:"body"`
	} `json:"request"`
	Want struct {
		Status int `json:"status"`
		// Outcome is the answer's status field.
		Outcome string `json:"outcome"`
		// Error is a substring of the answer's error.
		Error string `json:"error"`
		// For a stored delivery: the subject, the event as a handler
		// sees it, and the JSON document Event.JSON returns (default:
		// the body).
		Subject     string  `json:"subject"`
		EventID     string  `json:"event_id"`
		EventType   string  `json:"event_type"`
		ContentType string  `json:"content_type"`
		JSON        *string `json:"json"`
	} `json:"want"`
}

func loadFixtures(t *testing.T) map[string]fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "interop", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no interop fixtures: %v", err)
	}
	out := map[string]fixture{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var f fixture
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = f
	}
	return out
}

// TestInteropFixtures sends every fixture through the whole ingress over
// HTTP on its own JetStream, then reads what was stored back through the
// consumer package, as a handler would get it.
func TestInteropFixtures(t *testing.T) {
	t.Parallel()
	for name, f := range loadFixtures(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, err := verify.New(f.Source.Scheme, f.Source.Secrets, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			idf, typf := bridge.DefaultFields(f.Source.Scheme)
			if f.Source.EventID != nil {
				idf = *f.Source.EventID
			}
			if f.Source.EventType != nil {
				typf = *f.Source.EventType
			}
			in := newIngress(t, bridge.Options{}, bridge.Source{Name: "src", Verifier: v, EventID: idf, EventType: typf})
			if f.Now != 0 {
				in.clock.Set(time.Unix(f.Now, 0))
			}

			req, err := http.NewRequest(http.MethodPost, in.url+"/webhooks/src", strings.NewReader(f.Request.Body))
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range f.Request.Headers {
				req.Header.Add(kv[0], kv[1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var ans bridge.Response
			_ = json.Unmarshal(raw, &ans)
			if resp.StatusCode != f.Want.Status {
				t.Fatalf("answer %d %s, want %d", resp.StatusCode, raw, f.Want.Status)
			}
			if f.Want.Outcome != "" && ans.Status != f.Want.Outcome {
				t.Errorf("outcome %q, want %q (%s)", ans.Status, f.Want.Outcome, raw)
			}
			if !strings.Contains(ans.Error, f.Want.Error) {
				t.Errorf("error %q, want it to mention %q", ans.Error, f.Want.Error)
			}
			if f.Want.Subject == "" {
				wantMsgs(t, in, 0)
				return
			}
			wantMsgs(t, in, 1)
			ev := fetchEvent(t, in)
			if ev.Subject != f.Want.Subject {
				t.Errorf("subject %q, want %q", ev.Subject, f.Want.Subject)
			}
			if ev.ID != f.Want.EventID || ans.EventID != f.Want.EventID {
				t.Errorf("event id %q (answer %q), want %q", ev.ID, ans.EventID, f.Want.EventID)
			}
			if ev.Type != f.Want.EventType {
				t.Errorf("event type %q, want %q", ev.Type, f.Want.EventType)
			}
			if !bytes.Equal(ev.Body, []byte(f.Request.Body)) {
				t.Errorf("stored body differs from the signed bytes:\n got %q\nwant %q", ev.Body, f.Request.Body)
			}
			if got := ev.Header.Get(stream.HeaderContentType); got != f.Want.ContentType {
				t.Errorf("%s = %q, want %q", stream.HeaderContentType, got, f.Want.ContentType)
			}
			sum := sha256.Sum256([]byte(f.Request.Body))
			if got := ev.Header.Get(stream.HeaderBodySHA256); got != hex.EncodeToString(sum[:]) {
				t.Errorf("body hash header %q", got)
			}
			wantJSON := f.Request.Body
			if f.Want.JSON != nil {
				wantJSON = *f.Want.JSON
			}
			doc, err := ev.JSON()
			if err != nil || string(doc) != wantJSON {
				t.Errorf("Event.JSON() = %q, %v; want %q", doc, err, wantJSON)
			}
		})
	}
}

// fetchEvent reads the one HOOKS message through a JetStream consumer and
// turns it into the Event a handler would get.
func fetchEvent(t *testing.T, in *ingress) consumer.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := in.js.JS.OrderedConsumer(ctx, stream.Hooks, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("fetch the stored delivery: %v", err)
	}
	ev, err := engine.EventFromMsg(msg)
	if err != nil {
		t.Fatalf("EventFromMsg: %v", err)
	}
	return ev
}

// TestConsumerFilterUsesProviderSpelling: a consumer configured with the
// provider's spelling of free-text and Shopify types receives those
// deliveries through a real durable consumer. The two spellings of one
// Shopify subject give one filter (JetStream refuses overlapping ones).
func TestConsumerFilterUsesProviderSpelling(t *testing.T) {
	t.Parallel()
	fx := loadFixtures(t)["github-repository-dispatch-free-text"]
	v, err := verify.New(fx.Source.Scheme, fx.Source.Secrets, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	idf, typf := bridge.DefaultFields(fx.Source.Scheme)
	in := newIngress(t, bridge.Options{}, bridge.Source{Name: "src", Verifier: v, EventID: idf, EventType: typf})
	h := http.Header{}
	for _, kv := range fx.Request.Headers {
		h.Add(kv[0], kv[1])
	}
	wantCode(t, in.post(t, "src", h, []byte(fx.Request.Body)), http.StatusAccepted)

	opts := engine.Options{Sources: []string{"src"}, EventTypes: []string{"repository_dispatch.deploy:staging", "orders/create", "orders.create"}}
	filters := opts.FilterSubjects()
	if len(filters) != 2 {
		t.Fatalf("filters %q, want two (orders/create and orders.create share one)", filters)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := in.js.JS.CreateConsumer(ctx, stream.Hooks, jetstream.ConsumerConfig{Durable: "spelling", FilterSubjects: filters, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("create consumer with %q: %v", filters, err)
	}
	msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("the free-text delivery did not reach the consumer: %v", err)
	}
	ev, err := engine.EventFromMsg(msg)
	if err != nil || ev.Type != "repository_dispatch.deploy:staging" {
		t.Fatalf("event type %q, %v", ev.Type, err)
	}
}
