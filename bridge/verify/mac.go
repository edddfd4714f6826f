package verify

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"time"
)

// dot separates a signed timestamp from the body in the schemes that sign
// "timestamp.body" (Stripe, generic HMAC).
var dot = []byte{'.'}

// rawKeys turns configured secrets into HMAC keys byte for byte: GitHub,
// Stripe, Shopify and Slack use the secret exactly as shown to the user
// (Stripe's "whsec_" is part of the key there, unlike Standard Webhooks).
// Nothing is trimmed, so a secret means one key only. An empty secret is
// refused: it would be a key anyone can guess.
func rawKeys(scheme string, secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%s: no secret", scheme)
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		if s == "" {
			return nil, fmt.Errorf("%s: secret #%d is empty", scheme, i+1)
		}
		keys[i] = []byte(s)
	}
	return keys, nil
}

// macOf is HMAC(key, parts[0] || parts[1] || ...), written part by part so
// "timestamp.body" is never copied into one buffer.
func macOf(h func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// macsOf is macOf for every active key, for [anyEqual].
func macsOf(h func() hash.Hash, keys [][]byte, parts ...[]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = macOf(h, k, parts...)
	}
	return out
}

// anyMatch reports whether one of the received signatures equals one of the
// expected MACs. Each comparison is constant time; stopping at the first
// match leaks only that the request is genuine, which the caller learns
// anyway.
func anyMatch(got, want [][]byte) bool {
	for _, g := range got {
		if anyEqual(g, want) {
			return true
		}
	}
	return false
}

// signatureValues returns the non-empty values of a signature header.
// A header repeated on several lines is read in full: a sender (or a
// proxy) may send a stale or garbled line before the good one, and
// reading only the first would refuse a genuine delivery.
func signatureValues(h http.Header, key string) []string {
	vs := h.Values(key)
	if len(vs) == 1 { // the common case, without allocating
		if vs[0] == "" {
			return nil
		}
		return vs
	}
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// maxUnixDigits bounds a signed timestamp: 18 decimal digits always fit in
// an int64, so parsing cannot overflow, and a year-30-billion timestamp is
// refused by the tolerance check instead.
const maxUnixDigits = 18

// parseUnix parses a signed timestamp in Unix seconds. Only plain ASCII
// digits are accepted (no sign, space or fraction): the timestamp is signed
// as the text that was sent, and refusing other spellings keeps one instant
// from having several valid encodings.
func parseUnix(s string) (time.Time, bool) {
	if len(s) == 0 || len(s) > maxUnixDigits {
		return time.Time{}, false
	}
	var sec int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return time.Time{}, false
		}
		sec = sec*10 + int64(c-'0')
	}
	return time.Unix(sec, 0), true
}

// decodeHex decodes a hex signature of exactly size bytes. Either letter
// case is accepted: senders differ, and case carries no signed information.
func decodeHex(s string, size int) ([]byte, bool) {
	if len(s) != 2*size {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, false
	}
	return b, true
}

// decodeBase64 decodes a standard-alphabet, padded base64 signature of
// exactly size bytes. Only the canonical spelling is accepted: Go's decoder
// otherwise skips CR/LF and ignores stray padding bits, which would give one
// signature several accepted spellings (a problem for anyone who dedupes or
// logs by signature).
func decodeBase64(s string, size int) ([]byte, bool) {
	if len(s) != base64.StdEncoding.EncodedLen(size) {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != size || base64.StdEncoding.EncodeToString(b) != s {
		return nil, false
	}
	return b, true
}
