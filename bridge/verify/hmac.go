package verify

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SchemeHMAC is the generic scheme: a plain HMAC of the body (or of
// "timestamp.body") in one header, as [HMACConfig] describes, for
// sources none of the named schemes fit.
const SchemeHMAC = "hmac"

func init() {
	register(&Scheme{
		name: SchemeHMAC,
		// Last: the generic scheme, for what no named one fits.
		rank: 1000,
		verifier: func(secrets []string, opts Options) (Verifier, error) {
			cfg := opts.HMAC
			// A general Tolerance only reaches a config that signs a
			// timestamp, like github ignoring it; an explicit
			// HMAC.Tolerance without a timestamp header is still
			// refused by NewHMAC.
			if cfg.Tolerance == 0 && cfg.TimestampHeader != "" {
				cfg.Tolerance = opts.Tolerance
			}
			return built(NewHMAC(secrets, cfg))
		},
		owns: is[*HMAC],
		tolerance: func(cfg HMACConfig) time.Duration {
			if cfg.TimestampHeader == "" {
				return 0
			}
			return DefaultTolerance
		},
		sign: signHMACHeaders,
		// A starting point: most such providers put both in the body,
		// and a source says where its own put them.
		id:  Location{Pointer: "/id"},
		typ: Location{Pointer: "/type"},
	})
}

// HMACConfig describes a provider that signs with a plain HMAC in one
// header, for sources none of the named schemes fit.
type HMACConfig struct {
	// Header carries the signature, e.g. "X-Signature". Required.
	Header string
	// Prefix is stripped from the header value before decoding, e.g.
	// "sha256=". Optional; when set it must be present.
	Prefix string
	// Encoding of the MAC: "hex" (the default when empty) or "base64"
	// (standard alphabet, padded). Case-insensitive.
	Encoding string
	// Algorithm is "sha256" (the default when empty) or "sha512".
	// Case-insensitive.
	Algorithm string
	// TimestampHeader, when set, names a header with the Unix time in
	// seconds; the signed content is then timestamp + "." + body and
	// Tolerance applies. When empty the body alone is signed and replays
	// cannot be refused.
	TimestampHeader string
	// Tolerance bounds |now - timestamp|; zero means [DefaultTolerance].
	// Setting it without TimestampHeader is an error: the author expects
	// replay protection that could not apply.
	Tolerance time.Duration
}

// isZero reports whether no field is set, so [New] can refuse generic
// settings given to a named scheme.
func (c HMACConfig) isZero() bool {
	return c == HMACConfig{}
}

// hmacSpec is a validated HMACConfig.
type hmacSpec struct {
	header, prefix, tsHeader string
	base64                   bool
	newHash                  func() hash.Hash
	size                     int
	tolerance                time.Duration
}

// compile validates c. Each error names the offending field so a YAML
// mistake can be found without reading code; values echoed are header
// names and option words, never secrets.
func (c HMACConfig) compile() (hmacSpec, error) {
	s := hmacSpec{prefix: c.Prefix, tolerance: c.Tolerance}
	if c.Header == "" {
		return s, fmt.Errorf("hmac: Header is required")
	}
	if !validHeaderName(c.Header) {
		return s, fmt.Errorf("hmac: Header %q is not a valid header name", c.Header)
	}
	s.header = http.CanonicalHeaderKey(c.Header)
	switch strings.ToLower(c.Encoding) {
	case "", "hex":
	case "base64":
		s.base64 = true
	default:
		return s, fmt.Errorf("hmac: Encoding %q is not \"hex\" or \"base64\"", c.Encoding)
	}
	switch strings.ToLower(c.Algorithm) {
	case "", "sha256":
		s.newHash, s.size = sha256.New, sha256.Size
	case "sha512":
		s.newHash, s.size = sha512.New, sha512.Size
	default:
		return s, fmt.Errorf("hmac: Algorithm %q is not \"sha256\" or \"sha512\"", c.Algorithm)
	}
	if c.Tolerance < 0 {
		return s, fmt.Errorf("hmac: Tolerance %v is negative", c.Tolerance)
	}
	if c.TimestampHeader == "" {
		if c.Tolerance != 0 {
			// A tolerance that cannot apply is a config mistake: the
			// author expected replay protection they would not get.
			return s, fmt.Errorf("hmac: Tolerance is set but TimestampHeader is empty")
		}
		return s, nil
	}
	if !validHeaderName(c.TimestampHeader) {
		return s, fmt.Errorf("hmac: TimestampHeader %q is not a valid header name", c.TimestampHeader)
	}
	s.tsHeader = http.CanonicalHeaderKey(c.TimestampHeader)
	if s.tsHeader == s.header {
		return s, fmt.Errorf("hmac: TimestampHeader is the same header as Header")
	}
	if s.tolerance == 0 {
		s.tolerance = DefaultTolerance
	}
	return s, nil
}

// validHeaderName reports whether name is an RFC 9110 token, the only
// thing an HTTP header name can be.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// HMAC verifies a configurable single-header HMAC signature (see
// [HMACConfig]).
type HMAC struct {
	keys [][]byte
	spec hmacSpec
}

// NewHMAC returns a verifier for cfg that accepts a signature made by any
// of secrets (used byte for byte; several allow rotation).
func NewHMAC(secrets []string, cfg HMACConfig) (*HMAC, error) {
	spec, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	keys, err := rawKeys("hmac", secrets)
	if err != nil {
		return nil, err
	}
	return &HMAC{keys: keys, spec: spec}, nil
}

// Verify implements [Verifier]. With a timestamp header, the signature is
// checked before the timestamp so that ErrStaleTimestamp always means a
// genuine but old (or early) request, never a forgery.
func (v *HMAC) Verify(h http.Header, body []byte, now time.Time) error {
	s := &v.spec
	sigs := signatureValues(h, s.header)
	if len(sigs) == 0 {
		return fmt.Errorf("hmac: %w", ErrMissingSignature)
	}
	var tsRaw string
	var ts time.Time
	if s.tsHeader != "" {
		tsRaw = h.Get(s.tsHeader)
		if tsRaw == "" {
			return fmt.Errorf("hmac: timestamp: %w", ErrMissingSignature)
		}
		var ok bool
		if ts, ok = parseUnix(tsRaw); !ok {
			return fmt.Errorf("hmac: timestamp: %w", ErrMalformedSignature)
		}
	}
	var got [][]byte
	prefixed := false
	for _, sig := range sigs {
		enc, ok := strings.CutPrefix(sig, s.prefix)
		if !ok {
			continue
		}
		prefixed = true
		var raw []byte
		if s.base64 {
			raw, ok = decodeBase64(enc, s.size)
		} else {
			raw, ok = decodeHex(enc, s.size)
		}
		if ok {
			got = append(got, raw)
		}
	}
	switch {
	case !prefixed:
		return fmt.Errorf("hmac: signature prefix: %w", ErrMalformedSignature)
	case len(got) == 0:
		return fmt.Errorf("hmac: signature encoding: %w", ErrMalformedSignature)
	}
	if !anyMatch(got, macsOf(s.newHash, v.keys, s.signed(tsRaw, body)...)) {
		return fmt.Errorf("hmac: %w", ErrBadSignature)
	}
	if s.tsHeader != "" && !withinTolerance(ts, now, s.tolerance) {
		return fmt.Errorf("hmac: %w", ErrStaleTimestamp)
	}
	return nil
}

// signed lists the parts of the signed content.
func (s *hmacSpec) signed(ts string, body []byte) [][]byte {
	if s.tsHeader == "" {
		return [][]byte{body}
	}
	return [][]byte{[]byte(ts), dot, body}
}

// signHMACHeaders is scheme hmac's signer for [SignHeaders]: the
// signature in cfg.Header and, with cfg.TimestampHeader, ts there.
func signHMACHeaders(secret, _ string, ts time.Time, body []byte, cfg HMACConfig) (http.Header, error) {
	spec, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	sig, err := SignHMAC(secret, cfg, ts, body)
	if err != nil {
		return nil, err
	}
	h := header(spec.header, sig)
	if spec.tsHeader != "" {
		h.Set(spec.tsHeader, unixText(ts))
	}
	return h, nil
}

// SignHMAC returns the value of cfg.Header for body, for senders and
// tests. With cfg.TimestampHeader set, the request must also carry that
// header with ts in Unix seconds; without it ts is ignored.
func SignHMAC(secret string, cfg HMACConfig, ts time.Time, body []byte) (string, error) {
	spec, err := cfg.compile()
	if err != nil {
		return "", err
	}
	mac := macOf(spec.newHash, []byte(secret), spec.signed(strconv.FormatInt(ts.Unix(), 10), body)...)
	if spec.base64 {
		return spec.prefix + base64.StdEncoding.EncodeToString(mac), nil
	}
	return spec.prefix + hex.EncodeToString(mac), nil
}
