package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/hookbridge/hookbridge/bridge/verify"
)

// Field says where a value (event id or type) is found in a verified
// delivery: a request header, or a JSON pointer (RFC 6901) into the body.
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

// extract reads the field from the header or the parsed body.
func (f Field) extract(h http.Header, body any) (string, error) {
	var v string
	if f.Header != "" {
		v = h.Get(f.Header)
		if _, present := h[http.CanonicalHeaderKey(f.Header)]; !present && f.AltHeader != "" {
			v = h.Get(f.AltHeader)
		}
	} else {
		s, ok := lookupPointer(body, f.Pointer)
		if !ok {
			return "", nil
		}
		v = s
	}
	if f.Suffix != "" && v != "" {
		if s, ok := lookupPointer(body, f.Suffix); ok && s != "" {
			v += "." + s
		}
	}
	return v, nil
}

// lookupPointer resolves an RFC 6901 pointer to a string or number value.
func lookupPointer(doc any, ptr string) (string, bool) {
	if ptr == "" || doc == nil {
		return "", false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[tok]
			if !ok {
				return "", false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(node) {
				return "", false
			}
			cur = node[i]
		default:
			return "", false
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	default:
		return "", false
	}
}

// parseBody decodes a verified JSON body for pointer lookups.
func parseBody(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: body is not valid JSON", errBadRequest)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: body has trailing data after JSON", errBadRequest)
	}
	return doc, nil
}

// DefaultFields says where each scheme's senders put the event id and
// type, following the providers' documentation.
func DefaultFields(scheme string) (id, typ Field) {
	switch scheme {
	case verify.SchemeStandardWebhooks:
		// The id read is the one the verifier checked: webhook-id, or
		// svix-id when the delivery uses Svix's header names (the rule of
		// verify.StandardHeaderSet).
		return Field{Header: verify.StandardHeaderID, AltHeader: verify.SvixHeaderID}, Field{Pointer: "/type"}
	case verify.SchemeGitHub:
		return Field{Header: "X-GitHub-Delivery"}, Field{Header: "X-GitHub-Event", Suffix: "/action"}
	case verify.SchemeShopify:
		return Field{Header: "X-Shopify-Webhook-Id"}, Field{Header: "X-Shopify-Topic"}
	case verify.SchemeSlack:
		return Field{Pointer: "/event_id"}, Field{Pointer: "/event/type"}
	default: // stripe, and a starting point for hmac
		return Field{Pointer: "/id"}, Field{Pointer: "/type"}
	}
}
