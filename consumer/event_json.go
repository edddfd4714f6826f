package consumer

import (
	"errors"
	"fmt"
	"mime"
	"net/url"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// formMediaType is the content type of form-encoded deliveries, such as
// GitHub's default one: the body is payload=<url-encoded JSON>.
const formMediaType = "application/x-www-form-urlencoded"

// JSON returns the delivery's JSON document whatever the content type it
// was sent with. For a form-encoded delivery (GitHub's default for
// webhooks made through its REST API, body "payload=<url-encoded JSON>")
// it is the decoded payload field; for every other delivery it is Body
// itself. Body always stays the signed bytes as received.
//
// It reads the content type from the message's Hookbridge-Content-Type
// header, which the ingress sets; events without it are taken as JSON.
func (e Event) JSON() ([]byte, error) {
	ct := e.Header.Get(stream.HeaderContentType)
	if ct == "" {
		return e.Body, nil
	}
	media, _, err := mime.ParseMediaType(ct)
	if err != nil || media != formMediaType {
		return e.Body, nil
	}
	return formPayload(e.Body)
}

// formPayload is the value of the one payload field of a form body, the
// same rule the ingress applies before reading the event id and type.
func formPayload(body []byte) ([]byte, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("event body is not valid form data: %w", err)
	}
	p, ok := vals["payload"]
	switch {
	case !ok:
		return nil, errors.New("form-encoded event body has no payload field")
	case len(p) != 1:
		return nil, errors.New("form-encoded event body has more than one payload field")
	}
	return []byte(p[0]), nil
}
