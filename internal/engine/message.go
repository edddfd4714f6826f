package engine

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// MsgParts is what [EventFromParts] needs of a HOOKS stream message,
// whether it was delivered by a consumer or read by sequence for a replay.
type MsgParts struct {
	Subject      string
	Header       nats.Header
	Data         []byte
	StreamSeq    uint64
	NumDelivered uint64    // 1 for a message read by sequence
	StoredAt     time.Time // when the stream stored it; used without a received-at header
}

// EventFromMsg turns a message delivered by a HOOKS consumer into a
// [consumer.Event]; see [EventFromParts].
func EventFromMsg(msg jetstream.Msg) (consumer.Event, error) {
	p := MsgParts{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()}
	if md, err := msg.Metadata(); err == nil {
		p.StreamSeq, p.NumDelivered, p.StoredAt = md.Sequence.Stream, md.NumDelivered, md.Timestamp
	}
	return EventFromParts(p)
}

// orderKey is what the scheduler orders by: an ordering key within its
// source. Order is per (source, key): two sources whose keys share a value
// ("o-1" from the demo and from another sender) name two entities, so
// neither waits for the other, and neither's dead letter is passed by the
// other's events (docs/DESIGN.md, "Order"). The NUL cannot occur in a
// source name.
func orderKey(source, key string) string { return source + "\x00" + key }

// EventFromParts turns a HOOKS stream message into a [consumer.Event]; it
// is the one place that does so, for delivered and replayed messages
// alike. The body hash is computed here rather than trusted from the
// header, so the inbox key always matches the bytes the handler sees.
func EventFromParts(p MsgParts) (consumer.Event, error) {
	h := p.Header
	if h == nil {
		h = nats.Header{}
	}
	ev := consumer.Event{
		Source:       h.Get(stream.HeaderSource),
		ID:           h.Get(stream.HeaderEventID),
		Header:       h,
		Body:         p.Data,
		BodySHA256:   sha256.Sum256(p.Data),
		Subject:      p.Subject,
		StreamSeq:    p.StreamSeq,
		NumDelivered: p.NumDelivered,
		OrderingKey:  h.Get(stream.HeaderOrderingKey),
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
		if source, tail, _, ok := stream.SplitHookSubject(p.Subject); ok {
			if ev.Source == "" {
				ev.Source = source
			}
			if ev.Type == "" {
				ev.Type, _ = stream.TypeFromSubject(tail)
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
	if ev.ReceivedAt.IsZero() {
		ev.ReceivedAt = p.StoredAt
	}
	switch {
	case ev.Source == "":
		return ev, fmt.Errorf("message on %s: %w: no source", p.Subject, errUnusable)
	case ev.ID == "":
		return ev, fmt.Errorf("message on %s: %w: no event id", p.Subject, errUnusable)
	case ev.Type == "":
		return ev, fmt.Errorf("message on %s: %w: no event type", p.Subject, errUnusable)
	}
	return ev, nil
}
