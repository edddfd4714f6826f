package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Event types are chosen by providers (and, through GitHub's
// repository_dispatch, by anyone who can call a provider's API), so they
// can hold any bytes. No delivery is refused for the characters of its
// type: the type is mapped to subject tokens by [TypeSubject], and its
// original spelling travels in [HeaderEventType].
//
// The mapping, byte by byte:
//
//   - A-Z a-z 0-9 '_' '-' are kept.
//   - '.' and '/' become the token separator '.', except where a separator
//     would leave an empty token (at the start, at the end, or right after
//     another separator): there they are escaped ("%2E", "%2F").
//   - Every other byte is escaped as '%' and two upper-case hex digits
//     ("deploy:staging" → "deploy%3Astaging", '%' itself → "%25",
//     '*' → "%2A", '>' → "%3E", 'é' → "%C3%A9").
//   - A mapped type longer than [MaxTypeSubjectBytes] keeps its first
//     bytes (never splitting an escape) followed by "%H" and 24 hex digits
//     of the SHA-256 of the original type. "%H" is not an escape the
//     mapping produces, so a shortened type never equals a mapped one.
//
// So the subject tokens are made of [A-Za-z0-9_-] and '%' only, never
// empty, never a wildcard. The mapping is deterministic and, apart from
// '/' and shortened types, reversible ([TypeFromSubject]): two types share
// a subject only when they differ solely by '/' versus '.' (Shopify's
// "orders/create" and a type spelled "orders.create"), or, for shortened
// types, on a 96-bit hash collision. The header keeps them apart.

// Limits of an event type.
const (
	// MaxEventTypeBytes bounds the original type (the header carries it,
	// and the ingress sizes its header headroom on it).
	MaxEventTypeBytes = 255
	// MaxTypeSubjectBytes bounds the mapped type in a subject.
	MaxTypeSubjectBytes = 200
)

// HeaderEventTypeEncoding is set to [TypeEncodingPercent] when
// [HeaderEventType] does not hold the type verbatim: NATS trims leading
// and trailing white space from header values and replaces CR and LF, so
// a type with those (or with other control bytes, or invalid UTF-8) is
// sent percent-encoded instead (every byte outside [A-Za-z0-9_.-/]), and
// [TypeFromHeader] decodes it.
const HeaderEventTypeEncoding = "Hookbridge-Event-Type-Encoding"

// TypeEncodingPercent is the one value of [HeaderEventTypeEncoding].
const TypeEncodingPercent = "percent"

// ValidTypeSpelling reports whether s is acceptable as an event type as
// a provider spells it: 1 to [MaxEventTypeBytes] bytes, any content. It is
// the check for configured event types (a consumer's event_types), which
// are mapped with [TypeSubject] like the deliveries' types.
func ValidTypeSpelling(s string) bool {
	return s != "" && len(s) <= MaxEventTypeBytes
}

const upperHex = "0123456789ABCDEF"

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// TypeSubject maps an event type to the subject tokens that follow
// "hooks.<source>." (rules above). The empty type gives ""; callers
// refuse an empty type before publishing.
func TypeSubject(eventType string) string {
	if isPlainTail(eventType) {
		return eventType // the common case, without allocating
	}
	var b strings.Builder
	b.Grow(len(eventType) + 8)
	for i := 0; i < len(eventType); i++ {
		c := eventType[i]
		switch {
		case plainByte(c):
			b.WriteByte(c)
		case c == '.' || c == '/':
			// A separator only where it leaves no empty token.
			last := i == len(eventType)-1
			prevSep := b.Len() == 0 || strings.HasSuffix(b.String(), ".")
			if last || prevSep {
				b.WriteByte('%')
				b.WriteByte(upperHex[c>>4])
				b.WriteByte(upperHex[c&0xF])
			} else {
				b.WriteByte('.')
			}
		default:
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0xF])
		}
	}
	out := b.String()
	if len(out) <= MaxTypeSubjectBytes {
		return out
	}
	sum := sha256.Sum256([]byte(eventType))
	const hashLen = 2 + 24
	cut := MaxTypeSubjectBytes - hashLen
	// Do not split an escape: back off to before a '%' within the last
	// two bytes.
	for j := cut - 1; j >= cut-2 && j >= 0; j-- {
		if out[j] == '%' {
			cut = j
			break
		}
	}
	return out[:cut] + "%H" + hex.EncodeToString(sum[:12])
}

// isPlainTail reports whether s maps to itself: dot-separated non-empty
// tokens of [A-Za-z0-9_-], short enough.
func isPlainTail(s string) bool {
	if s == "" || len(s) > MaxTypeSubjectBytes || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			if s[i-1] == '.' {
				return false
			}
			continue
		}
		if !plainByte(c) {
			return false
		}
	}
	return true
}

// TypeFromSubject reverses [TypeSubject] for a subject tail: escapes are
// decoded and separators become '.'. It reports false for a shortened
// type (whose original is only in the header) and for text that
// TypeSubject cannot have produced. A Shopify topic comes back with '.'
// for '/'; the header has the original.
func TypeFromSubject(tail string) (string, bool) {
	if strings.Contains(tail, "%H") {
		return "", false
	}
	return percentDecode(tail)
}

// TypeHeader is the value of [HeaderEventType] for eventType and whether
// it had to be percent-encoded (then [HeaderEventTypeEncoding] must be
// set to [TypeEncodingPercent]).
func TypeHeader(eventType string) (value string, encoded bool) {
	if headerSafe(eventType) {
		return eventType, false
	}
	var b strings.Builder
	for i := 0; i < len(eventType); i++ {
		c := eventType[i]
		if plainByte(c) || c == '.' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xF])
	}
	return b.String(), true
}

// TypeFromHeader is the event type carried by a message's
// [HeaderEventType] value and [HeaderEventTypeEncoding] value.
func TypeFromHeader(value, encoding string) (string, bool) {
	if encoding != TypeEncodingPercent {
		return value, true
	}
	return percentDecode(value)
}

// headerSafe reports whether a NATS header carries s unchanged and it is
// text: valid UTF-8 without control characters and without leading or
// trailing white space.
func headerSafe(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func percentDecode(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b = append(b, byte(hi<<4|lo))
		i += 2
	}
	return string(b), true
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	default:
		return -1
	}
}

// CheckHeader refuses header names and values that would corrupt the NATS
// protocol or override the headers the relay controls (Nats-*). Enqueue
// checks a message's headers with it before they reach the outbox.
func CheckHeader(name, value string) error {
	if name == "" || len(name) > 256 {
		return fmt.Errorf("header name %q: must be 1-256 characters", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' || c == ':' {
			return fmt.Errorf("header name %q: invalid character", name)
		}
	}
	if len(name) >= 5 && strings.EqualFold(name[:5], "nats-") {
		return fmt.Errorf("header name %q: Nats-* headers are reserved", name)
	}
	if strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("header %q: value contains a line break", name)
	}
	return nil
}
