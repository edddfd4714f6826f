package consumer

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// EventFromMsg turns a HOOKS stream message into an [Event]. The body hash
// is computed here rather than trusted from the header, so the inbox key
// always matches the bytes the handler sees.
func EventFromMsg(msg jetstream.Msg) (Event, error) {
	h := msg.Headers()
	ev := Event{
		Source:     h.Get(stream.HeaderSource),
		ID:         h.Get(stream.HeaderEventID),
		Header:     h,
		Body:       msg.Data(),
		BodySHA256: sha256.Sum256(msg.Data()),
		Subject:    msg.Subject(),
	}
	// The header holds the provider's spelling of the type, the subject
	// only its mapping to tokens.
	if v := h.Get(stream.HeaderEventType); v != "" {
		if t, ok := stream.TypeFromHeader(v, h.Get(stream.HeaderEventTypeEncoding)); ok {
			ev.Type = t
		}
	}
	// Messages published by other tools may lack hookbridge's headers:
	// fall back to the subject and the de-duplication id.
	if ev.Source == "" || ev.Type == "" {
		parts := strings.SplitN(msg.Subject(), ".", 3)
		if len(parts) == 3 && parts[0] == stream.HooksRoot {
			if ev.Source == "" {
				ev.Source = parts[1]
			}
			if ev.Type == "" {
				ev.Type, _ = stream.TypeFromSubject(parts[2])
			}
		}
	}
	// The type is stored as text (inbox, dead letters): a type Postgres
	// text cannot hold (NUL, invalid UTF-8) keeps its escaped spelling.
	if !utf8.ValidString(ev.Type) || strings.IndexByte(ev.Type, 0) >= 0 {
		ev.Type, _ = stream.TypeHeader(ev.Type)
	}
	if ev.ID == "" {
		ev.ID = strings.TrimPrefix(h.Get(stream.HeaderMsgID), ev.Source+":")
	}
	if ts := h.Get(stream.HeaderReceivedAt); ts != "" {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			ev.ReceivedAt = t
		}
	}
	if md, err := msg.Metadata(); err == nil {
		ev.StreamSeq = md.Sequence.Stream
		ev.NumDelivered = md.NumDelivered
		if ev.ReceivedAt.IsZero() {
			ev.ReceivedAt = md.Timestamp
		}
	}
	switch {
	case ev.Source == "":
		return ev, fmt.Errorf("message on %s: %w: no source", msg.Subject(), errUnusable)
	case ev.ID == "":
		return ev, fmt.Errorf("message on %s: %w: no event id", msg.Subject(), errUnusable)
	case ev.Type == "":
		return ev, fmt.Errorf("message on %s: %w: no event type", msg.Subject(), errUnusable)
	}
	return ev, nil
}
