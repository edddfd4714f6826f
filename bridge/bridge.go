// Package bridge is hookbridge's HTTP ingress. It reads each webhook's
// body with a hard limit, verifies its signature over the raw bytes, and
// publishes the body to JetStream with the sender's event id as
// Nats-Msg-Id. It answers success only after JetStream stored the message
// and never touches Postgres, so intake goes on while the database is down.
package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Source is one configured webhook sender.
type Source struct {
	// Name appears in the URL (/webhooks/{name}) and in subjects.
	Name string
	// Verifier checks each delivery's signature.
	Verifier verify.Verifier
	// EventID and EventType say where the sender puts them.
	EventID   Field
	EventType Field
	// OrderingKey, when set, says where the entity an event is about is
	// named (an order id, an account id): events with the same key are
	// applied in the order they were accepted, by every consumer, on any
	// instance (docs/DESIGN.md, "Order"). The message is published to the
	// key's partition; a delivery without the key is published unkeyed
	// and counted (TraceReceiveEndData.Unkeyed). Nil: no key.
	OrderingKey *Field
	// Challenge answers the sender's endpoint-verification handshake, if
	// it has one. Nil means the default for the verifier's scheme
	// ([verify.SchemeOf], [ChallengeFor]): Slack's url_verification for a
	// *verify.Slack, none otherwise.
	Challenge Challenge

	// scheme is the verifier's scheme (nil for a verifier verify does not
	// describe), whose id-less notices get an id of their own
	// (verify.Scheme.NoticeID).
	scheme *verify.Scheme
}

// Options configure the ingress handler.
type Options struct {
	Sources []Source
	// MaxBodyBytes is the largest accepted body (default
	// [DefaultMaxBodyBytes]). The NATS server's max_payload must be at
	// least [RequiredMaxPayload] of it; New refuses otherwise.
	MaxBodyBytes int64
	// PublishTimeout bounds all a request waits on JetStream for
	// (default 5s): the publish with its retries and, for a repeated id,
	// reading the original and recording a conflict. A publish nobody
	// answered (a stream leader election, a reconnect) is tried again
	// with the same Nats-Msg-Id until it is stored or the budget is spent.
	PublishTimeout time.Duration
	// RetryAfter is sent with 503 answers (default 5s).
	RetryAfter time.Duration
	// MaxInFlight bounds the requests being verified and published at
	// once (default [DefaultMaxInFlight]; negative means no bound). A slot
	// is taken once the body is in, so slow senders cannot hold them. A
	// request over the bound is answered 503 with Retry-After at once.
	MaxInFlight int
	// MaxBodyMemory bounds the bytes of all bodies being read or held at
	// once (default [DefaultMaxInFlight] × MaxBodyBytes: room for a body at
	// the limit in every slot of the default MaxInFlight; negative means
	// no bound).
	// A body that would go over it is answered 503 overloaded. It must
	// hold one body at MaxBodyBytes plus a byte; New refuses less.
	MaxBodyMemory int64
	// MinBodyRate is the slowest body upload accepted, in bytes per
	// second, after [BodyReadGrace] (default [DefaultMinBodyRate];
	// negative: no minimum, only the server's ReadTimeout). A slower
	// sender is cut off with 400 "body too slow".
	MinBodyRate int64
	// Now is the clock (default time.Now); tests set it.
	Now    func() time.Time
	Logger *slog.Logger
	// LogInterval is how often at most one line is logged per cause of
	// refusal, with a count of those suppressed (default
	// [DefaultLogInterval]; negative: every one). Successes are logged
	// only at the debug level.
	LogInterval time.Duration
	// HealthHold is how long PublishHealth stays red after the last
	// publish refused for insufficient storage, a refusal no probe can
	// see end (default [DefaultHealthHold]).
	HealthHold time.Duration
	// Tracer, when set, observes each request and each publish
	// (metrics, tracing); see observe.go.
	Tracer Tracer
	// Partitions is the number of partitions keyed messages are spread
	// over (default stream.DefaultPartitions). It must be the number the
	// HOOKS stream records; the app checks that before it serves.
	Partitions int
}

// HeaderHeadroom is the room NATS's max_payload must leave beyond
// MaxBodyBytes: the server counts the message headers in the payload.
// hookbridge's own headers take at most about 2 KiB (ids, source and type
// are bounded, see TestHeaderHeadroomCoversWorstCase); the rest is for
// trace context.
const HeaderHeadroom = 8 << 10

// DefaultMaxBodyBytes is the default body limit: 1 MiB less
// [HeaderHeadroom], so that a body at the limit and its headers fit the
// NATS default max_payload of 1 MiB.
const DefaultMaxBodyBytes = 1<<20 - HeaderHeadroom

// RequiredMaxPayload is the smallest NATS max_payload that stores every
// body up to maxBodyBytes (0: the default) with its headers.
func RequiredMaxPayload(maxBodyBytes int64) int64 {
	if maxBodyBytes <= 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	return maxBodyBytes + HeaderHeadroom
}

// DefaultMaxInFlight is the default bound on requests being verified and
// published at once.
const DefaultMaxInFlight = 256

// Handler serves POST /webhooks/{source}.
type Handler struct {
	js      jetstream.JetStream
	opts    Options
	sources map[string]Source
	// inflight is a counting semaphore of MaxInFlight slots (nil: no bound).
	inflight chan struct{}

	limiter *logLimiter
	health  publishHealth
	bodies  bodyBudget

	mu    sync.Mutex
	hooks jetstream.Stream // looked up on first duplicate, then cached
}

// New validates opts and returns the ingress handler.
func New(js jetstream.JetStream, opts Options) (*Handler, error) {
	opts = opts.withDefaults()
	if opts.MaxBodyMemory > 0 && opts.MaxBodyMemory < opts.MaxBodyBytes+1 {
		// A body at the limit needs its bytes plus one (to see EOF); with
		// less, every such body would be answered 503 and retried forever.
		return nil, fmt.Errorf("max body memory %d cannot hold one body of max_body_bytes %d: it needs at least %d",
			opts.MaxBodyMemory, opts.MaxBodyBytes, opts.MaxBodyBytes+1)
	}
	if js != nil && js.Conn() != nil {
		// Checked here rather than per request: a body the server cannot
		// hold would be answered 503 and retried by the sender forever.
		if got, need := js.Conn().MaxPayload(), RequiredMaxPayload(opts.MaxBodyBytes); got < need {
			return nil, fmt.Errorf("max_body_bytes %d needs a NATS max_payload of at least %d (the body plus %d bytes of headers), but the server allows %d: raise the server's max_payload or lower max_body_bytes to %d",
				opts.MaxBodyBytes, need, HeaderHeadroom, got, got-HeaderHeadroom)
		}
	}
	h := &Handler{js: js, opts: opts, sources: map[string]Source{}, limiter: newLogLimiter(opts.LogInterval)}
	h.bodies.limit = opts.MaxBodyMemory
	if opts.MaxInFlight > 0 {
		h.inflight = make(chan struct{}, opts.MaxInFlight)
	}
	for _, s := range opts.Sources {
		if err := h.addSource(s); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// withDefaults fills in the options left zero.
func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 5 * time.Second
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = 5 * time.Second
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.Partitions <= 0 {
		o.Partitions = stream.DefaultPartitions
	}
	if o.MaxBodyMemory == 0 {
		o.MaxBodyMemory = DefaultMaxInFlight * o.MaxBodyBytes
	}
	if o.MinBodyRate == 0 {
		o.MinBodyRate = DefaultMinBodyRate
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LogInterval == 0 {
		o.LogInterval = DefaultLogInterval
	}
	if o.HealthHold <= 0 {
		o.HealthHold = DefaultHealthHold
	}
	return o
}

// addSource validates s and registers it under its name.
func (h *Handler) addSource(s Source) error {
	if !stream.ValidName(s.Name) {
		return fmt.Errorf("source %q: name must be letters, digits, '-' or '_'", s.Name)
	}
	if _, dup := h.sources[s.Name]; dup {
		return fmt.Errorf("source %q declared twice", s.Name)
	}
	if s.Verifier == nil {
		return fmt.Errorf("source %q: no verifier", s.Name)
	}
	if err := s.EventID.Validate(); err != nil {
		return fmt.Errorf("source %q: event id: %w", s.Name, err)
	}
	if err := s.EventType.Validate(); err != nil {
		return fmt.Errorf("source %q: event type: %w", s.Name, err)
	}
	if s.OrderingKey != nil {
		if err := s.OrderingKey.Validate(); err != nil {
			return fmt.Errorf("source %q: ordering key: %w", s.Name, err)
		}
	}
	s.scheme = verify.SchemeOf(s.Verifier)
	if s.Challenge == nil {
		s.Challenge = challengeOf(s.scheme)
	}
	h.sources[s.Name] = s
	return nil
}

// Pattern is where to mount the handler on an http.ServeMux.
const Pattern = "/webhooks/{source}"

// Response is the JSON body of every answer.
type Response struct {
	Status  string `json:"status"`
	EventID string `json:"event_id,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ServeHTTP implements http.Handler. Mount it at [Pattern].
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	r = h.traceReceiveStart(r)
	res := h.serve(w, r)
	h.logRequest(r.Context(), res, start)
	h.traceReceiveEnd(r, res, start)
}

// reasonOverloaded is the reason of a request refused by MaxInFlight.
const reasonOverloaded = "overloaded"

type result struct {
	source string
	code   int
	body   Response
	reason string // short cause for logs and metrics; never secrets or bodies
	// unkeyed marks a delivery of a source with an ordering key that
	// carried none it could read: it was published without order. It
	// holds the cause, one of the Unkeyed* constants.
	unkeyed string
	err     error // the underlying failure of a 5xx, for the log line
}

// replyFunc writes an answer and returns what the request's log line and
// metrics report of it.
type replyFunc func(code int, body Response, reason string) result

// failFunc writes an error answer whose reason is also its body's error.
type failFunc func(code int, reason string) result

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) result {
	name := r.PathValue("source")
	reply := func(code int, body Response, reason string) result {
		if code == http.StatusServiceUnavailable {
			// Whole seconds, rounded up: "0" would invite an immediate retry.
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(h.opts.RetryAfter.Seconds()))))
		}
		writeJSON(w, code, body)
		return result{source: name, code: code, body: body, reason: reason}
	}
	fail := func(code int, reason string) result {
		return reply(code, Response{Status: StatusError, Error: reason}, reason)
	}

	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return fail(http.StatusMethodNotAllowed, "method not allowed")
	}
	src, ok := h.sources[name]
	if !ok {
		return fail(http.StatusNotFound, "unknown source")
	}
	// The body first, under its own bounds (body.go): a slow sender
	// must not hold a slot that fast ones need.
	body, release, err := h.readBody(w, r)
	defer release()
	if err != nil {
		return fail(bodyRefusal(err))
	}
	if h.inflight != nil {
		// Refuse at once rather than queue: a queue would hold the
		// bodies (and connections) the bounds are there to limit.
		select {
		case h.inflight <- struct{}{}:
			defer func() { <-h.inflight }()
		default:
			return fail(http.StatusServiceUnavailable, reasonOverloaded)
		}
	}
	received := h.opts.Now()
	if err := src.Verifier.Verify(r.Header, body, received); err != nil {
		return fail(http.StatusUnauthorized, "signature: "+verify.Reason(err))
	}

	// Only now, with the signature checked, is the body looked at.
	if src.Challenge != nil {
		answer, err := src.Challenge(r.Header, body)
		if err != nil {
			return fail(http.StatusBadRequest, err.Error())
		}
		if answer != nil {
			writeChallenge(w, answer)
			return result{source: name, code: http.StatusOK, body: Response{Status: StatusChallenge}, reason: "challenge"}
		}
	}
	media := mediaType(r.Header)
	ident, err := identify(src, r.Header, media, body)
	if err != nil {
		return fail(http.StatusBadRequest, err.Error())
	}
	reply = markUnkeyed(reply, ident.unkeyed)
	return h.store(r.Context(), src, ident, media, body, received, reply, fail)
}

// bodyRefusal is the answer's code and reason for a body readBody refused.
func bodyRefusal(err error) (int, string) {
	switch {
	case errors.Is(err, errBodyTooLarge):
		return http.StatusRequestEntityTooLarge, "body too large"
	case errors.Is(err, errBodyMemory):
		return http.StatusServiceUnavailable, reasonOverloaded
	case errors.Is(err, errBodyTooSlow):
		return http.StatusBadRequest, "body too slow"
	default:
		return http.StatusBadRequest, "could not read body"
	}
}

// store publishes a verified delivery to HOOKS and answers it; a delivery
// JetStream drops as a repeat is answered by answerRepeat.
func (h *Handler) store(ctx context.Context, src Source, ident identity, media string, body []byte, received time.Time, reply replyFunc, fail failFunc) result {
	sum := sha256.Sum256(body)
	sumHex := hex.EncodeToString(sum[:])
	msg := hookMsg(ident, src.Name, media, sumHex, received, body, h.opts.Partitions)

	// One budget for everything this request waits on JetStream for: the
	// publish with its retries, and for a repeat the read of the original
	// and the conflict record. A fresh budget per step would let a leader
	// election that holds up several streams at once stretch the answer
	// to a multiple of PublishTimeout, past what senders wait for.
	ctx, cancel := context.WithTimeout(ctx, h.opts.PublishTimeout)
	defer cancel()
	ack, attempts, err := h.publish(ctx, msg, stream.Hooks, stream.MsgID(src.Name, ident.id))
	if err != nil {
		reason := "broker unavailable"
		if refusal := storageRefusal(err); refusal != "" {
			reason = "broker refused: " + refusal
		}
		res := fail(http.StatusServiceUnavailable, reason)
		res.err = fmt.Errorf("publish: %w", err)
		return res
	}
	if !ack.Duplicate {
		return reply(http.StatusAccepted, Response{Status: StatusAccepted, EventID: ident.id, Seq: ack.Sequence}, "")
	}
	return h.answerRepeat(ctx, src.Name, ident, body, sumHex, ack, attempts, reply, fail)
}

// answerRepeat answers a delivery JetStream dropped as a repeat of the
// message at ack.Sequence. Same bytes: a harmless retry. Different bytes:
// a conflict, which must be recorded rather than silently dropped.
func (h *Handler) answerRepeat(ctx context.Context, source string, ident identity, body []byte, sumHex string,
	ack *jetstream.PubAck, attempts int, reply replyFunc, fail failFunc) result {
	id := ident.id
	origSum, found, err := h.storedHash(ctx, ack.Sequence)
	if err != nil {
		res := fail(http.StatusServiceUnavailable, "broker unavailable")
		res.err = fmt.Errorf("read the original of a duplicate: %w", err)
		return res
	}
	if !found {
		// The original left the stream (limits, purge) while its id is
		// still in the duplicate window, so this body can be compared with
		// nothing and JetStream did not store it. Neither "duplicate" nor
		// "conflict" would be honest; ask the sender to retry. Once the
		// window has passed the delivery is stored and the consumer's inbox
		// decides between duplicate and conflict.
		res := fail(http.StatusServiceUnavailable, "original delivery no longer readable; retry later")
		res.err = fmt.Errorf("original of a duplicate (seq %d) is gone from the stream", ack.Sequence)
		return res
	}
	if origSum == sumHex {
		if attempts > 1 {
			// An earlier attempt of this very request was stored and its
			// ack lost (say, to a leader change): it is this delivery.
			return reply(http.StatusAccepted, Response{Status: StatusAccepted, EventID: id, Seq: ack.Sequence}, "")
		}
		return reply(http.StatusOK, Response{Status: StatusDuplicate, EventID: id, Seq: ack.Sequence}, "")
	}
	if err := h.publishConflict(ctx, source, id, ident.typ, body, sumHex, origSum, ack.Sequence); err != nil {
		res := fail(http.StatusServiceUnavailable, "broker unavailable")
		res.err = fmt.Errorf("record conflict: %w", err)
		return res
	}
	return reply(http.StatusConflict, Response{Status: StatusConflict, EventID: id, Seq: ack.Sequence, Error: "event id already received with a different body"}, "conflict")
}

// identity is what a verified delivery says about itself.
type identity struct {
	id, typ string
	// key is the ordering key's header value (stream.OrderingKeyHeader),
	// set when keyed.
	key   string
	keyed bool
	// unkeyed is why a source with an ordering key got none from this
	// delivery (an Unkeyed* constant), "" otherwise.
	unkeyed string
}

// markUnkeyed wraps reply so that its results record a delivery published
// without its source's ordering key, and why ("": it was keyed, or its
// source has no key).
func markUnkeyed(reply replyFunc, unkeyed string) replyFunc {
	if unkeyed == "" {
		return reply
	}
	return func(code int, body Response, reason string) result {
		res := reply(code, body, reason)
		res.unkeyed = unkeyed
		return res
	}
}

// identify extracts and validates the event id, type and ordering key.
// media is the body's declared media type: the fields of a form-encoded
// delivery are read from the JSON in its payload field.
func identify(src Source, header http.Header, media string, body []byte) (identity, error) {
	// Only the id and type may refuse a body that is not JSON: without
	// them there is nothing to store. The ordering key is a refinement;
	// a delivery whose key cannot be read is published unkeyed, like one
	// that names none. Refusing it would refuse a correctly signed
	// delivery for good: Shopify sends XML when a subscription asks for
	// it, its id and type are headers, and it removes a subscription
	// after repeated failures.
	idNeedsBody := src.EventID.needsBody() || src.EventType.needsBody()
	keyNeedsBody := src.OrderingKey != nil && src.OrderingKey.needsBody()
	var doc []byte
	var docErr error
	if idNeedsBody || keyNeedsBody {
		doc, docErr = readDocument(media, body)
		if docErr != nil && idNeedsBody {
			return identity{}, docErr
		}
	}
	var ident identity
	ident.id, _ = src.EventID.extract(header, doc)
	ident.typ, _ = src.EventType.extract(header, doc)
	if ident.id == "" && src.scheme != nil {
		read := func(ptr string) (string, bool) { return jsonLookup(doc, ptr) }
		if nid, ntyp, ok := src.scheme.NoticeID(read); ok {
			ident.id, ident.typ = nid, ntyp
		}
	}
	if src.OrderingKey != nil {
		// A key that is absent (or empty, or not a string or number)
		// leaves the delivery unkeyed: an event about no entity has
		// nothing to be ordered with, and refusing it would refuse what
		// providers really send (Stripe's balance.available names no
		// object id).
		switch k, _ := src.OrderingKey.extract(header, doc); {
		case keyNeedsBody && docErr != nil:
			ident.unkeyed = UnkeyedUnreadable
		case k == "":
			ident.unkeyed = UnkeyedAbsent
		default:
			ident.key, ident.keyed = stream.OrderingKeyHeader(k), true
		}
	}
	// The type is kept as the provider spells it: stream.HookSubject maps
	// any bytes to safe subject tokens, so no type is refused for its
	// characters, only for its length (it travels in a header).
	switch {
	case ident.id == "":
		return identity{}, errors.New("missing event id")
	case !stream.ValidEventID(ident.id):
		return identity{}, errors.New("event id must be 1-255 printable characters without spaces")
	case ident.typ == "":
		return identity{}, errors.New("missing event type")
	case !stream.ValidTypeSpelling(ident.typ):
		return identity{}, fmt.Errorf("event type longer than %d bytes", stream.MaxEventTypeBytes)
	}
	return ident, nil
}

// hookMsg is the HOOKS message of a verified delivery: on its key's
// partition when it has one. Every header value is bounded (source 64,
// id 255, type 255 bytes before encoding, key 200 or a 71-byte hash, media
// type 127), which HeaderHeadroom relies on.
func hookMsg(ident identity, source, media, sumHex string, received time.Time, body []byte, partitions int) *nats.Msg {
	subject := stream.HookSubject(source, ident.typ)
	if ident.keyed {
		subject = stream.KeyedHookSubject(stream.Partition(ident.key, partitions), source, ident.typ)
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(stream.HeaderSource, source)
	msg.Header.Set(stream.HeaderEventID, ident.id)
	setTypeHeader(msg.Header, ident.typ)
	if ident.keyed {
		msg.Header.Set(stream.HeaderOrderingKey, ident.key)
	}
	switch {
	case ident.unkeyed != "":
		// The source has a key and this delivery carried none: the mark
		// tells consumers it is the source's own, not one from before the
		// source had its key, which their partitions wait for.
		msg.Header.Set(stream.HeaderUnkeyed, ident.unkeyed)
	case !ident.keyed:
		// The source has no key: once it has one, this message is from
		// before it, and the partitions wait for it, also when the key
		// was on before (a keyed message of the source comes before it).
		msg.Header.Set(stream.HeaderUnkeyed, stream.UnkeyedKeyOff)
	}
	msg.Header.Set(stream.HeaderBodySHA256, sumHex)
	msg.Header.Set(stream.HeaderReceivedAt, received.UTC().Format(time.RFC3339Nano))
	if media != "" {
		// The stored body is the signed bytes unchanged; this says how to
		// read it (consumer.Event.JSON).
		msg.Header.Set(stream.HeaderContentType, media)
	}
	return msg
}

// setTypeHeader records the provider's spelling of the type, encoded when
// a NATS header would not carry it unchanged.
func setTypeHeader(h nats.Header, typ string) {
	v, encoded := stream.TypeHeader(typ)
	h.Set(stream.HeaderEventType, v)
	if encoded {
		h.Set(stream.HeaderEventTypeEncoding, stream.TypeEncodingPercent)
	}
}

// storedHash returns the body hash header of the HOOKS message at seq.
func (h *Handler) storedHash(ctx context.Context, seq uint64) (string, bool, error) {
	s, err := h.hooksStream(ctx)
	if err != nil {
		return "", false, err
	}
	raw, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("get original message %d: %w", seq, err)
	}
	if sum := raw.Header.Get(stream.HeaderBodySHA256); sum != "" {
		return sum, true, nil
	}
	b := sha256.Sum256(raw.Data)
	return hex.EncodeToString(b[:]), true, nil
}

func (h *Handler) hooksStream(ctx context.Context) (jetstream.Stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hooks != nil {
		return h.hooks, nil
	}
	s, err := h.js.Stream(ctx, stream.Hooks)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", stream.Hooks, err)
	}
	h.hooks = s
	return s, nil
}

func (h *Handler) publishConflict(ctx context.Context, source, id, typ string, body []byte, sumHex, origSum string, origSeq uint64) error {
	msg := nats.NewMsg(stream.ConflictSubject(source))
	msg.Data = body
	msg.Header.Set(stream.HeaderSource, source)
	msg.Header.Set(stream.HeaderEventID, id)
	setTypeHeader(msg.Header, typ)
	msg.Header.Set(stream.HeaderBodySHA256, sumHex)
	msg.Header.Set(stream.HeaderOriginalSHA256, origSum)
	msg.Header.Set(stream.HeaderOriginalSeq, strconv.FormatUint(origSeq, 10))
	// One conflict per distinct rejected body: a sender retrying the same
	// conflicting delivery does not add rows.
	_, _, err := h.publish(ctx, msg, stream.Conflicts, stream.MsgID(source, id)+":"+sumHex)
	if err != nil {
		return fmt.Errorf("publish conflict: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, body Response) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body) // the client may be gone; nothing to do
}
