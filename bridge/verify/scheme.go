package verify

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Scheme describes one signature scheme, once: how its deliveries are
// verified ([New]) and signed ([SignHeaders]), whether its signature
// covers a timestamp, where its senders put the event id, type and the
// entity an event is about, and how its endpoint handshake is answered.
// Each scheme's own file registers its descriptor (github.go the
// "github" one, and so on), so a new scheme is one file and its test.
//
// A Scheme is read-only; [LookupScheme] and [SchemeOf] find one, and
// [Schemes] lists their names. Its methods are pure: they do no I/O and
// read only what they are given.
type Scheme struct {
	// name is the scheme's name in configuration.
	name string
	// rank is the scheme's place in [Schemes]: the project's own
	// standard first, the providers in the order they were added, the
	// generic hmac last.
	rank int
	// verifier builds the scheme's verifier. New has already refused a
	// negative Tolerance and HMAC options given to a scheme other than
	// hmac.
	verifier func(secrets []string, opts Options) (Verifier, error)
	// owns reports whether v is a verifier of this scheme.
	owns func(v Verifier) bool
	// sign returns the headers a sender adds (see SignHeaders).
	sign func(secret, id string, ts time.Time, body []byte, hmac HMACConfig) (http.Header, error)
	// tolerance is the tolerance the verifier applies to the signed
	// timestamp when Options leave it zero; nil, or 0, when the scheme
	// (with this hmac configuration) signs no timestamp.
	tolerance func(hmac HMACConfig) time.Duration
	// id and typ are where the senders put the event id and type.
	id, typ Location
	// key is where the senders name the entity an event is about, when
	// the provider has one obvious id for it; nil otherwise.
	key *Location
	// handshake, when set, answers the senders' endpoint-verification
	// handshake (see Scheme.Handshake).
	handshake func(header http.Header, body []byte) (*HandshakeAnswer, error)
	// notice, when set, identifies a delivery the senders make without
	// an event id (see Scheme.NoticeID).
	notice func(read func(pointer string) (string, bool)) (id, typ string, ok bool)
}

// Location says where a value (an event id, type or ordering key) is
// found in a verified delivery: a request header, or a JSON pointer (RFC
// 6901) into the body. Exactly one of Header and Pointer is set. Suffix,
// when set, is a JSON pointer whose value, if present, is appended after
// a dot (GitHub's "issues" + action "opened" = "issues.opened").
// AltHeader, with Header only, is read when the request has no Header at
// all (Svix's svix-id for Standard Webhooks' webhook-id). The ingress
// reads it as its own bridge.Field.
type Location struct {
	Header    string
	AltHeader string
	Pointer   string
	Suffix    string
}

// HandshakeAnswer is the body of the 200 answer to a sender's
// endpoint-verification handshake.
type HandshakeAnswer struct {
	ContentType string
	Body        []byte
}

// registry holds every registered scheme, in [Schemes] order.
var registry []*Scheme

// register adds s to the registry; each scheme's file calls it from its
// init function. TestEverySchemeIsComplete checks what it is given.
func register(s *Scheme) {
	registry = append(registry, s)
	slices.SortStableFunc(registry, func(a, b *Scheme) int { return cmp.Compare(a.rank, b.rank) })
}

// LookupScheme returns the scheme named name, as written in
// configuration ([Schemes] lists the names).
func LookupScheme(name string) (*Scheme, bool) {
	for _, s := range registry {
		if s.name == name {
			return s, true
		}
	}
	return nil, false
}

// SchemeOf returns the scheme v verifies (v as [New] or the scheme's own
// constructor built it), or nil for a [Verifier] of another kind.
func SchemeOf(v Verifier) *Scheme {
	for _, s := range registry {
		if s.owns(v) {
			return s
		}
	}
	return nil
}

// Schemes lists the scheme names [New] accepts, in a fixed order. It
// returns a new slice each time, so callers may modify it.
func Schemes() []string {
	names := make([]string, len(registry))
	for i, s := range registry {
		names[i] = s.name
	}
	return names
}

// Name is the scheme's name in configuration.
func (s *Scheme) Name() string { return s.name }

// EventID is where the scheme's senders put the event id.
func (s *Scheme) EventID() Location { return s.id }

// EventType is where the scheme's senders put the event type.
func (s *Scheme) EventType() Location { return s.typ }

// OrderingKey is where the scheme's senders name the entity an event is
// about (an invoice, an order), when the provider has one obvious id for
// it; ok is false when it has none.
func (s *Scheme) OrderingKey() (key Location, ok bool) {
	if s.key == nil {
		return Location{}, false
	}
	return *s.key, true
}

// Tolerance is how far from now the scheme's verifier accepts a signed
// timestamp when [Options] leave Tolerance zero, or 0 when the scheme
// signs no timestamp, so that a captured delivery verifies forever and
// only its id refuses a replay. hmac is scheme hmac's configuration (it
// signs a timestamp only with a TimestampHeader); the other schemes
// ignore it.
func (s *Scheme) Tolerance(hmac HMACConfig) time.Duration {
	if s.tolerance == nil {
		return 0
	}
	return s.tolerance(hmac)
}

// HasHandshake reports whether the scheme's senders check an endpoint
// with a handshake before they deliver to it ([Scheme.Handshake]).
func (s *Scheme) HasHandshake() bool { return s.handshake != nil }

// Handshake answers the scheme's endpoint-verification handshake, such as
// Slack's url_verification. It is called with a delivery whose signature
// passed, before its event id and type are looked for (a handshake has
// neither). It returns nil, nil for an ordinary delivery and always for a
// scheme without a handshake; the answer to send with 200 for a
// handshake; or an error, which never holds a secret or the body, for a
// handshake that cannot be answered.
func (s *Scheme) Handshake(header http.Header, body []byte) (*HandshakeAnswer, error) {
	if s.handshake == nil {
		return nil, nil
	}
	return s.handshake(header, body)
}

// NoticeID gives an id and type to a delivery that carries no event id
// but that the scheme's senders make in place of events (Slack's
// app_rate_limited notice), from its signed fields: read returns the
// value a JSON pointer names in the delivery's document, as the ingress
// reads fields. ok is false for any other delivery, and always for a
// scheme without such notices.
func (s *Scheme) NoticeID(read func(pointer string) (string, bool)) (id, typ string, ok bool) {
	if s.notice == nil {
		return "", "", false
	}
	return s.notice(read)
}

// DefaultTolerance is how far a signed timestamp may be from now, in
// either direction, unless [Options] say otherwise: five minutes, what
// Standard Webhooks, Stripe (300 s) and Slack each recommend.
const DefaultTolerance = 5 * time.Minute

// Options tunes the verifier [New] builds.
type Options struct {
	// Tolerance bounds |now - signed timestamp| for the schemes that sign
	// one (those whose [Scheme.Tolerance] is not 0). Zero means the
	// scheme's default, [DefaultTolerance]. The schemes that sign no
	// timestamp ignore it.
	Tolerance time.Duration
	// HMAC configures scheme "hmac" and must be left zero for the others.
	// HMAC.Tolerance, when set, wins over Tolerance.
	HMAC HMACConfig
}

// New builds the verifier for scheme with secrets as the active secrets
// (several allow rotation: a signature by any of them passes). It is the
// entry point for configuration; errors name the scheme or field at fault
// and never include a secret.
func New(scheme string, secrets []string, opts Options) (Verifier, error) {
	if opts.Tolerance < 0 {
		return nil, fmt.Errorf("verify: Tolerance %v is negative", opts.Tolerance)
	}
	if scheme != SchemeHMAC && !opts.HMAC.isZero() {
		return nil, fmt.Errorf("verify: HMAC options given for scheme %q; they apply to %q only", scheme, SchemeHMAC)
	}
	s, ok := LookupScheme(scheme)
	if !ok {
		return nil, fmt.Errorf("verify: unknown scheme %q (known: %s)", scheme, strings.Join(Schemes(), ", "))
	}
	return s.verifier(secrets, opts)
}

// built converts a constructor's result to (Verifier, error) without the
// typed-nil trap: a nil *GitHub stored in a Verifier is not == nil.
func built[V Verifier](v V, err error) (Verifier, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// is reports whether v is a V, for [Scheme] owns.
func is[V Verifier](v Verifier) bool {
	_, ok := v.(V)
	return ok
}

// always is a tolerance that does not depend on the configuration.
func always(d time.Duration) func(HMACConfig) time.Duration {
	return func(HMACConfig) time.Duration { return d }
}
