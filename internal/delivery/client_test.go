package delivery_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/internal/delivery"
)

func clientEndpoint(allowPrivate bool) delivery.Endpoint {
	return delivery.Endpoint{Timeout: 10 * time.Second, Concurrency: 2, AllowPrivate: allowPrivate}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// A receiver on loopback is refused when the connection is made, by IP
// and by a name that resolves to it (what DNS rebinding would do), and
// reached when the endpoint allows private addresses.
func TestClientRefusesLoopbackAtConnect(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)

	c := delivery.NewClient(clientEndpoint(false))
	for _, u := range []string{srv.URL, byName} {
		if _, err := get(t, c, u); !errors.Is(err, delivery.ErrRefusedAddress) {
			t.Errorf("GET %s: err = %v, want ErrRefusedAddress", u, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("receiver saw %d requests through a refused connection", n)
	}

	c = delivery.NewClient(clientEndpoint(true))
	resp, err := get(t, c, srv.URL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("with AllowPrivate: resp %v, err %v", resp, err)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("receiver saw %d requests, want 1", n)
	}
}

// A redirect is the endpoint's answer: the client does not follow it.
func TestClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var followed atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	resp, err := get(t, delivery.NewClient(clientEndpoint(true)), srv.URL+"/hook")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want 302", resp.StatusCode)
	}
	if n := followed.Load(); n != 0 {
		t.Fatalf("redirect target got %d requests, want 0", n)
	}
}

func TestAddressRule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ip            string
		strict, loose bool // refused without / with AllowPrivate
	}{
		{"127.0.0.1", true, false},
		{"::1", true, false},
		{"::ffff:127.0.0.1", true, false},
		{"10.0.0.1", true, false},
		{"172.16.5.4", true, false},
		{"192.168.1.1", true, false},
		{"100.64.0.1", true, false},
		{"169.254.10.1", true, false},
		{"fe80::1", true, false},
		{"fc00::1", true, false},
		{"169.254.169.254", true, true},
		{"fd00:ec2::254", true, true},
		{"0.0.0.0", true, true},
		{"::", true, true},
		{"224.0.0.1", true, true},
		{"ff02::1", true, true},
		{"8.8.8.8", false, false},
		{"2606:4700:4700::1111", false, false},
	} {
		ip := netip.MustParseAddr(c.ip)
		if got := delivery.Refused(ip, false) != ""; got != c.strict {
			t.Errorf("%s: refused = %v, want %v", c.ip, got, c.strict)
		}
		if got := delivery.Refused(ip, true) != ""; got != c.loose {
			t.Errorf("%s with AllowPrivate: refused = %v, want %v", c.ip, got, c.loose)
		}
	}
}

var secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func validEndpoint() delivery.Endpoint {
	return delivery.Endpoint{Name: "partner", URL: "https://hooks.example.com/in", Subjects: []string{"events.>"},
		Secrets: []string{secret}}.WithDefaults()
}

// Literal refused addresses are refused when the endpoint is configured.
func TestValidateRefusesPrivateURLs(t *testing.T) {
	t.Parallel()
	if err := validEndpoint().Validate(); err != nil {
		t.Fatalf("valid endpoint: %v", err)
	}
	for _, u := range []string{"http://127.0.0.1/x", "http://10.0.0.1/x", "http://169.254.169.254/latest/meta-data", "http://[::1]:8080/"} {
		e := validEndpoint()
		e.URL = u
		if err := e.Validate(); !errors.Is(err, delivery.ErrRefusedAddress) {
			t.Errorf("%s: err = %v, want ErrRefusedAddress", u, err)
		}
	}
	e := validEndpoint()
	e.URL, e.AllowPrivate = "http://10.0.0.1/x", true
	if err := e.Validate(); err != nil {
		t.Errorf("private with AllowPrivate: %v", err)
	}
	e.URL = "http://169.254.169.254/"
	if err := e.Validate(); err == nil {
		t.Errorf("metadata address with AllowPrivate accepted")
	}
	for name, mod := range map[string]func(*delivery.Endpoint){
		"no secret":       func(e *delivery.Endpoint) { e.Secrets = nil },
		"bad secret":      func(e *delivery.Endpoint) { e.Secrets = []string{"whsec_!!"} },
		"no subject":      func(e *delivery.Endpoint) { e.Subjects = nil },
		"foreign subject": func(e *delivery.Endpoint) { e.Subjects = []string{"hooks.>"} },
		"reserved header": func(e *delivery.Endpoint) { e.Headers = map[string]string{"webhook-id": "x"} },
		"credentials":     func(e *delivery.Endpoint) { e.URL = "https://u:p@hooks.example.com/" },
		"scheme":          func(e *delivery.Endpoint) { e.URL = "ftp://hooks.example.com/" },
		"delayed first":   func(e *delivery.Endpoint) { e.Retry = []time.Duration{time.Second} },
	} {
		e := validEndpoint()
		mod(&e)
		err := e.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "MfKQ9r8") {
			t.Errorf("%s: error echoes the secret: %v", name, err)
		}
	}
}

// TLS is verified: a receiver with a certificate nobody signed is refused.
func TestClientVerifiesTLS(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, err := get(t, delivery.NewClient(clientEndpoint(true)), srv.URL)
	if !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Fatalf("err = %v, want a certificate verification error", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("receiver saw %d requests", n)
	}
}
