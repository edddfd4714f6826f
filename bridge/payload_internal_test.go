package bridge

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestHeaderHeadroomCoversWorstCase builds the HOOKS message with every
// header at its longest (64-byte source, 255-byte id, a 255-byte type
// that must be percent-encoded, the longest ordering key (a hashed one), a
// 127-byte media type), adds what the
// publish adds (Nats-Msg-Id, Nats-Expected-Stream) and W3C trace context
// with a full 512-byte tracestate, and checks the encoded header block
// stays within HeaderHeadroom, the room max_payload keeps beyond the body.
func TestHeaderHeadroomCoversWorstCase(t *testing.T) {
	source := strings.Repeat("s", 64)
	id := strings.Repeat("i", 255)
	typ := strings.Repeat("\x01", stream.MaxEventTypeBytes)
	media := "application/" + strings.Repeat("m", 127-len("application/"))
	key := stream.OrderingKeyHeader(strings.Repeat("k", 1000))
	ident := identity{id: id, typ: typ, key: key, keyed: true}
	msg := hookMsg(ident, source, media, strings.Repeat("f", 64), time.Now(), nil, stream.MaxPartitions)
	msg.Header.Set(jetstream.MsgIDHeader, stream.MsgID(source, id))
	msg.Header.Set(jetstream.ExpectedStreamHeader, stream.Hooks)
	msg.Header.Set("traceparent", "00-"+strings.Repeat("a", 32)+"-"+strings.Repeat("b", 16)+"-01")
	msg.Header.Set("tracestate", strings.Repeat("t", 512))
	// NATS encodes "NATS/1.0\r\n", "Key: value\r\n" per value, "\r\n".
	size := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range msg.Header {
		for _, v := range vs {
			size += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	t.Logf("worst-case header block: %d bytes of %d", size, HeaderHeadroom)
	if size > HeaderHeadroom {
		t.Fatalf("headers take %d bytes, more than HeaderHeadroom %d", size, HeaderHeadroom)
	}
	if v := msg.Header.Get(stream.HeaderEventType); len(v) != 3*stream.MaxEventTypeBytes {
		t.Fatalf("type header %d bytes; the worst case was not exercised", len(v))
	}
}
