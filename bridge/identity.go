package bridge

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// Field says where a value (event id, type or ordering key) is found in a
// verified delivery: a request header, or a JSON pointer (RFC 6901) into
// the body. It is the ingress's reading of a [verify.Location], and
// converts from one.
// Exactly one of Header and Pointer is set. Suffix, when set, is a JSON
// pointer whose value, if present, is appended after a dot (GitHub's
// "issues" + action "opened" = "issues.opened"). AltHeader, with Header
// only, is read when the request has no Header at all (Svix's svix-id for
// Standard Webhooks' webhook-id).
type Field struct {
	Header    string
	AltHeader string
	Pointer   string
	Suffix    string
}

func (f Field) needsBody() bool { return f.Pointer != "" || f.Suffix != "" }

// Validate reports a configuration mistake.
func (f Field) Validate() error {
	if (f.Header == "") == (f.Pointer == "") {
		return errors.New("set exactly one of header and pointer")
	}
	if f.AltHeader != "" && f.Header == "" {
		return errors.New("an alternative header needs a header")
	}
	for _, p := range []string{f.Pointer, f.Suffix} {
		if p != "" && !strings.HasPrefix(p, "/") {
			return fmt.Errorf("JSON pointer %q must start with '/'", p)
		}
	}
	return nil
}

// errBadRequest marks input problems answered with 400.
var errBadRequest = errors.New("bad request")

// extract reads the field from the header or the JSON document (already
// checked by checkJSON; nil when no field reads it).
func (f Field) extract(h http.Header, doc []byte) (string, error) {
	var v string
	if f.Header != "" {
		v = h.Get(f.Header)
		if _, present := h[http.CanonicalHeaderKey(f.Header)]; !present && f.AltHeader != "" {
			v = h.Get(f.AltHeader)
		}
	} else {
		s, ok := jsonLookup(doc, f.Pointer)
		if !ok {
			return "", nil
		}
		v = s
	}
	if f.Suffix != "" && v != "" {
		if s, ok := jsonLookup(doc, f.Suffix); ok && s != "" {
			v += "." + s
		}
	}
	return v, nil
}

// formMediaType is the content type of form-encoded deliveries. GitHub
// sends its webhooks this way unless the hook was created with
// content_type json: the body is payload=<url-encoded JSON>.
const formMediaType = "application/x-www-form-urlencoded"

// mediaType is the declared media type of a request body, lower case and
// without parameters, or "" when none (or an unreadable one) is declared.
// It is recorded in the message, so its length is bounded.
func mediaType(h http.Header) string {
	ct := h.Get("Content-Type")
	if ct == "" {
		return ""
	}
	if strings.HasPrefix(ct, "application/json") && (len(ct) == len("application/json") || ct[len("application/json")] == ';') {
		return "application/json" // the common case, without parsing
	}
	m, _, err := mime.ParseMediaType(ct)
	if err != nil || len(m) > 127 {
		return ""
	}
	return m
}

// jsonDocument is the JSON document of a verified body: the body itself,
// or for a form-encoded delivery the value of its one payload field. The
// body stays untouched; only the id and type are read from the document.
func jsonDocument(media string, body []byte) ([]byte, error) {
	if media != formMediaType {
		return body, nil
	}
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: body is not valid form data", errBadRequest)
	}
	p, ok := vals["payload"]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: form body has no payload field", errBadRequest)
	case len(p) != 1:
		return nil, fmt.Errorf("%w: form body has more than one payload field", errBadRequest)
	}
	return []byte(p[0]), nil
}

// DefaultFields says where each scheme's senders put the event id and
// type, following the providers' documentation: the scheme's
// [verify.Scheme.EventID] and [verify.Scheme.EventType]. An unknown
// scheme gets the body's /id and /type.
func DefaultFields(scheme string) (id, typ Field) {
	s, ok := verify.LookupScheme(scheme)
	if !ok {
		return Field{Pointer: "/id"}, Field{Pointer: "/type"}
	}
	return Field(s.EventID()), Field(s.EventType())
}

// DefaultOrderingKey says where a scheme's senders name the entity an
// event is about, when the provider has one obvious id for it
// ([verify.Scheme.OrderingKey]), and nil otherwise:
//
//   - stripe: the event's object, data.object.id (an invoice, a
//     subscription, a customer): its events apply in order.
//   - shopify: the resource's admin_graphql_api_id ("gid://shopify/Order/1"),
//     unique across resource kinds, unlike the numeric id.
//   - github, slack, standard-webhooks, hmac: none. A GitHub delivery is
//     about one of many kinds of things, a Slack event about a channel,
//     a message or a user; Standard Webhooks leaves the payload to the
//     sender. Set ordering_key on the source.
func DefaultOrderingKey(scheme string) *Field {
	s, ok := verify.LookupScheme(scheme)
	if !ok {
		return nil
	}
	key, ok := s.OrderingKey()
	if !ok {
		return nil
	}
	f := Field(key)
	return &f
}
