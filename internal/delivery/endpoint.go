package delivery

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// Defaults of [Endpoint].
const (
	// DefaultTimeout bounds one attempt, from connect to the end of the
	// answer's headers (Svix and Convoy use 15s and 30s; 15s keeps a slow
	// endpoint from holding a slot for long).
	DefaultTimeout = 15 * time.Second
	// DefaultConcurrency is how many attempts of one unordered endpoint
	// may be in flight at once.
	DefaultConcurrency = 16
	// MaxHeaderValue bounds an extra header's value.
	MaxHeaderValue = 1024
	// DefaultDisableAfter is how long an endpoint may fail every attempt
	// before it is disabled: five days, as Svix. A receiver down over a
	// long weekend keeps its endpoint; one gone for good stops costing
	// attempts, and its events wait for it to be enabled again.
	DefaultDisableAfter = 5 * 24 * time.Hour
)

// DefaultRetry is Svix's schedule: the delay before each attempt, the
// first at once. Eight attempts over about 27h40m, so a receiver down for
// a day still gets the event.
var DefaultRetry = []time.Duration{0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Endpoint is one configured receiver of events.
type Endpoint struct {
	// Name identifies the endpoint in its consumer's name
	// (delivery_<name>), in metrics and in the tables; [stream.ValidName].
	Name string
	// URL is where events are posted (http or https).
	URL string
	// Subjects are the EVENTS subjects it receives, wildcards allowed
	// ("events.billing.>").
	Subjects []string
	// Secrets sign every request (Standard Webhooks, "whsec_<base64>").
	// During a rotation list both: each request carries one signature
	// per secret, so the receiver can verify with either.
	Secrets []string
	// Timeout bounds one attempt (DefaultTimeout).
	Timeout time.Duration
	// Rate is the most requests per second to this endpoint, 0 for no
	// limit. Every endpoint has one reader across instances at a time, so
	// the limit holds whatever the number of instances.
	Rate float64
	// Concurrency bounds attempts in flight at once (DefaultConcurrency),
	// across instances too.
	Concurrency int
	// Retry is the delay before each attempt, the first 0 (at once); its
	// length is the number of attempts ([DefaultRetry]).
	Retry []time.Duration
	// Ordered delivers events of one key in stream order: a failing event
	// holds the later events of its key, and only those.
	Ordered bool
	// KeyHeader names the EVENTS message header whose value is the
	// ordering key of an ordered endpoint; a message without it (or with
	// KeyHeader empty) is keyed by its subject.
	KeyHeader string
	// Headers are added to every request; they cannot replace the
	// signature, id, timestamp or content type headers.
	Headers map[string]string
	// AllowPrivate lets the endpoint be on loopback, private, link-local
	// or CGNAT addresses (an in-house receiver). Cloud metadata addresses
	// stay refused.
	AllowPrivate bool
	// DisableAfter is how long the endpoint may fail every attempt before
	// it is disabled ([DefaultDisableAfter]).
	DisableAfter time.Duration
}

// DisplayURL is the endpoint's URL as status, logs and the console show
// it: scheme and host only. Its path may carry a token (many webhook URLs
// are secret by their path) and its query too, so both are cut ("/…"
// stands for a path).
func (e Endpoint) DisplayURL() string { return redactURL(e.URL) }

// WithDefaults returns e with zero fields set to their defaults.
func (e Endpoint) WithDefaults() Endpoint {
	if e.Timeout <= 0 {
		e.Timeout = DefaultTimeout
	}
	if e.Concurrency <= 0 {
		e.Concurrency = DefaultConcurrency
	}
	if len(e.Retry) == 0 {
		e.Retry = DefaultRetry
	}
	if e.DisableAfter <= 0 {
		e.DisableAfter = DefaultDisableAfter
	}
	return e
}

// reservedHeaders are set by the sender; an endpoint's Headers may not
// replace them.
var reservedHeaders = map[string]bool{
	"Webhook-Id": true, "Webhook-Timestamp": true, "Webhook-Signature": true,
	"Content-Type": true, "Content-Length": true, "Host": true, "User-Agent": true,
	"Transfer-Encoding": true, "Connection": true,
}

var headerName = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

// Validate reports the first thing wrong with e (after [Endpoint.WithDefaults]).
// Secrets are checked for form only and never echoed.
func (e Endpoint) Validate() error {
	if !stream.ValidName(e.Name) {
		return fmt.Errorf("endpoint %q: name must be letters, digits, '-' or '_'", e.Name)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("endpoint %s: "+format, append([]any{e.Name}, args...)...)
	}
	if err := checkURL(e.URL, e.AllowPrivate); err != nil {
		return fail("%w", err)
	}
	if len(e.Subjects) == 0 {
		return fail("no subjects")
	}
	for _, s := range e.Subjects {
		if s != stream.EventsRoot+".>" && !strings.HasPrefix(s, stream.EventsRoot+".") || strings.ContainsAny(s, " \t\r\n") {
			return fail("subject %q is not under %s.", s, stream.EventsRoot)
		}
	}
	if len(e.Secrets) == 0 {
		return fail("no secret: deliveries are always signed")
	}
	for i, s := range e.Secrets {
		if err := checkSecret(s); err != nil {
			return fail("secret #%d: %w", i+1, err)
		}
	}
	if e.Timeout <= 0 || e.Concurrency <= 0 || len(e.Retry) == 0 || e.DisableAfter <= 0 {
		return fail("timeout, concurrency, retry and disable_after must be set (call WithDefaults)")
	}
	if e.Rate < 0 {
		return fail("rate %v is negative", e.Rate)
	}
	if e.Retry[0] != 0 {
		// The first attempt is made when the event is read.
		return fail("the first retry step must be 0 (the first attempt is made at once)")
	}
	for i, d := range e.Retry {
		if d < 0 {
			return fail("retry step %d is negative", i+1)
		}
	}
	for k, v := range e.Headers {
		if !headerName.MatchString(k) {
			return fail("header name %q is not a token", k)
		}
		if reservedHeaders[http.CanonicalHeaderKey(k)] {
			return fail("header %s is set by the sender", k)
		}
		if len(v) > MaxHeaderValue || strings.ContainsAny(v, "\r\n\x00") {
			return fail("header %s: value too long or has a line break", k)
		}
	}
	return nil
}

// checkSecret checks a Standard Webhooks secret's form: "whsec_" then
// base64 of at least 24 bytes (Svix's are 24 or 32).
func checkSecret(s string) error {
	rest, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return errors.New(`must start with "whsec_"`)
	}
	key, err := decodeBase64(rest)
	if err != nil {
		return errors.New("not base64 after whsec_")
	}
	if len(key) < 24 {
		return fmt.Errorf("%d bytes; at least 24 are needed", len(key))
	}
	return nil
}

// checkURL checks the endpoint URL at configuration time: http(s), no
// credentials in it, and a literal IP must be one the client may dial. A
// name is checked again at every connect ([NewClient]).
func checkURL(raw string, allowPrivate bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("url does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url scheme %q: want http or https", u.Scheme)
	}
	if u.User != nil {
		return errors.New("url must not carry credentials; use headers")
	}
	if u.Hostname() == "" {
		return errors.New("url has no host")
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		if why := refused(ip, allowPrivate); why != "" {
			return fmt.Errorf("url host %s is %s: %w", ip, why, ErrRefusedAddress)
		}
	}
	return nil
}
