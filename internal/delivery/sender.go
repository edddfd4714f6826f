package delivery

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"golang.org/x/time/rate"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Signer returns the Standard Webhooks signature ("v1,<base64>") of one
// delivery with one secret. The application passes verify.SignStandard,
// the project's one signer (internal packages may not import bridge).
type Signer func(secret, id string, ts time.Time, body []byte) (string, error)

// Standard Webhooks header names, as bridge/verify spells them.
const (
	HeaderID        = "Webhook-Id"
	HeaderTimestamp = "Webhook-Timestamp"
	HeaderSignature = "Webhook-Signature"
)

const (
	// ackMargin is how much longer than one attempt's timeout a message
	// stays delivered to this sender before JetStream redelivers it:
	// room for recording the attempt and acking (a few ms on a healthy
	// database; 5s on a slow one).
	ackMargin = 5 * time.Second
	// maxAckPending bounds the events of one endpoint out at once:
	// waiting for a retry (unordered: a NakWithDelay is pending too) or,
	// on an ordered endpoint, parked behind a failing event of their key.
	// When a failing endpoint reaches it, only that endpoint waits.
	maxAckPending = 1000
	// maxRetryAfter caps a Retry-After so a receiver cannot park an event
	// beyond the longest step of the default schedule.
	maxRetryAfter = 10 * time.Hour
	// priorityGroup is the group pinned endpoints' reads use.
	priorityGroup = "delivery"
	userAgent     = "hookbridge-delivery/1"
)

// ConsumerName is the durable on EVENTS of endpoint name.
func ConsumerName(name string) string { return "delivery_" + name }

// Options configure a [Sender].
type Options struct {
	Endpoint Endpoint
	JS       jetstream.JetStream
	Pool     *pgxpool.Pool
	Sign     Signer
	// Client is the HTTP client (default [NewClient] of the endpoint).
	Client *http.Client
	Logger *slog.Logger
}

// Sender delivers the events of one endpoint. It reads EVENTS through the
// endpoint's own durable, so nothing another endpoint does delays it.
//
// Across instances: an unordered endpoint without a rate limit is read by
// every instance at once (JetStream hands each event to one of them). An
// ordered or rate-limited endpoint is read by one instance at a time: its
// consumer has a pinned priority group, so JetStream delivers to a single
// pinned client and moves the pin only when that client stops pulling for
// the ack wait. Order per key and the rate limit are then kept in one
// process, and hold across instances as long as a reader that lost its pin
// is really gone (a paused process that resumes after its pin moved can
// send the events it still holds once more, in their order).
type Sender struct {
	e       Endpoint
	js      jetstream.JetStream
	pool    *pgxpool.Pool
	sign    Signer
	client  *http.Client
	log     *slog.Logger
	cons    jetstream.Consumer
	pinned  bool
	ackWait time.Duration
	limiter *rate.Limiter // nil: no limit
	slots   chan struct{} // Concurrency attempts in flight
	inHand  chan struct{} // unordered: messages being handled
	rec     *recorder
	hooks   testHooks

	// Ordered endpoints only: every event this sender holds (parked or
	// being delivered) by stream sequence, kept alive with InProgress;
	// per key, the events waiting behind the one being delivered; and,
	// while a takeover window is open, the events read during it.
	mu        sync.Mutex
	held      map[uint64]*heldMsg
	keys      map[string][]*heldMsg
	pin       string
	buffering bool
	buffer    []*heldMsg
}

type testHooks struct {
	// afterSend runs after an attempt's answer came and before anything
	// is recorded or acked; true drops the message there, as a crash would.
	afterSend func(eventID string, status int) bool
}

type heldMsg struct {
	msg jetstream.Msg // the latest delivery of it (guarded by Sender.mu)
	seq uint64
	key string
}

// NewSender validates the endpoint and creates or updates its durable on
// EVENTS. A new durable starts with the events published after it: an
// endpoint added today is not sent yesterday's events.
func NewSender(ctx context.Context, opts Options) (*Sender, error) {
	e := opts.Endpoint.WithDefaults()
	if err := e.Validate(); err != nil {
		return nil, err
	}
	if opts.JS == nil || opts.Pool == nil || opts.Sign == nil {
		return nil, errors.New("delivery: sender needs JetStream, a database pool and a signer")
	}
	s := &Sender{
		e: e, js: opts.JS, pool: opts.Pool, sign: opts.Sign, client: opts.Client, log: opts.Logger,
		pinned: e.Ordered || e.Rate > 0, ackWait: e.Timeout + ackMargin,
		slots: make(chan struct{}, e.Concurrency), inHand: make(chan struct{}, 2*e.Concurrency),
		held: map[uint64]*heldMsg{}, keys: map[string][]*heldMsg{},
	}
	if s.client == nil {
		s.client = NewClient(e)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "delivery", "endpoint", e.Name)
	s.rec = newRecorder(s.pool, s.log)
	if e.Rate > 0 {
		// A burst of one: the partner's limit is a rate, not a bucket we
		// may empty at once after a quiet minute.
		s.limiter = rate.NewLimiter(rate.Limit(e.Rate), 1)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        ConsumerName(e.Name),
		Description:    "hookbridge delivery to endpoint " + e.Name,
		FilterSubjects: e.Subjects,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        s.ackWait,
		// Attempts are counted and ended by the sender (the retry
		// schedule, then a dead letter); the server never drops one.
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
	}
	if s.pinned {
		cfg.PriorityPolicy = jetstream.PriorityPolicyPinned
		cfg.PriorityGroups = []string{priorityGroup}
		cfg.PinnedTTL = s.ackWait
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, stream.Events, cfg)
	if err != nil {
		return nil, fmt.Errorf("delivery %s: consumer %s on %s: %w", e.Name, cfg.Durable, stream.Events, err)
	}
	s.cons = cons
	return s, nil
}

// Endpoint is the sender's endpoint, defaults applied.
func (s *Sender) Endpoint() Endpoint { return s.e }

// Run delivers until ctx is done, then stops reading, lets the attempts
// in flight end (each bounded by the endpoint's timeout) and returns nil.
func (s *Sender) Run(ctx context.Context) error {
	// The recorder stops after the last attempt (defers run in reverse).
	recCtx, recStop := context.WithCancel(context.WithoutCancel(ctx))
	recDone := make(chan struct{})
	go func() { defer close(recDone); s.rec.run(recCtx) }()
	defer func() { recStop(); <-recDone }()
	var wg conc.WaitGroup
	defer wg.Wait()
	ahead := 2 * s.e.Concurrency
	if s.e.Rate > 0 {
		// Read no more than the rate sends in half an ack wait, so no
		// message waits in the client's buffer until it is redelivered.
		ahead = max(1, min(ahead, int(s.e.Rate*s.ackWait.Seconds()/2)))
	}
	opts := []jetstream.PullConsumeOpt{
		// Few messages ahead: what is fetched but not started still
		// counts in max ack pending and waits behind this endpoint.
		jetstream.PullMaxMessages(ahead),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				s.log.Warn("delivery read", "err", err)
			}
		}),
	}
	if s.pinned {
		opts = append(opts, jetstream.PullPriorityGroup(priorityGroup))
	}
	cc, err := s.cons.Consume(func(m jetstream.Msg) { s.onMsg(ctx, &wg, m) }, opts...)
	if err != nil {
		return fmt.Errorf("delivery %s: consume: %w", s.e.Name, err)
	}
	if s.e.Ordered {
		wg.Go(func() { s.heartbeat(ctx) })
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}

// onMsg is called for each message, one at a time.
func (s *Sender) onMsg(ctx context.Context, wg *conc.WaitGroup, m jetstream.Msg) {
	if ctx.Err() != nil {
		return // stopping: leave it for redelivery
	}
	if s.e.Ordered {
		s.dispatchOrdered(ctx, wg, m)
		return
	}
	// Twice Concurrency messages in hand: while some wait for their
	// ack to be confirmed or their record to be queued, others use the
	// HTTP slots.
	select {
	case s.inHand <- struct{}{}:
	case <-ctx.Done():
		return
	}
	wg.Go(func() {
		defer func() { <-s.inHand }()
		s.deliverUnordered(ctx, m)
	})
}

// deliverUnordered makes one attempt and leaves the retry to JetStream
// (NakWithDelay), so a failing event holds no memory and no slot.
func (s *Sender) deliverUnordered(ctx context.Context, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		s.log.Warn("delivery: message without metadata", "err", err)
		_ = m.Term()
		return
	}
	n := int(md.NumDelivered)
	res, ok := s.attempt(ctx, m, md, n)
	if !ok {
		return
	}
	switch {
	case res.success():
		s.ack(ctx, m)
	case n < len(s.e.Retry):
		if err := m.NakWithDelay(s.nextDelay(n, res)); err != nil {
			s.log.Warn("delivery: nak", "seq", md.Sequence.Stream, "err", err)
		}
	case !s.deadLetter(ctx, m, md, n, res):
		// Offered again a little later rather than dropped unrecorded.
		_ = m.NakWithDelay(deadLetterRetry)
	}
}

// nextDelay is the wait before attempt n+1 after attempt n failed with
// res: the schedule's step, or a longer Retry-After of a 429 or 503.
func (s *Sender) nextDelay(n int, res result) time.Duration {
	d := s.e.Retry[min(n, len(s.e.Retry)-1)]
	if res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable {
		d = max(d, min(res.retryAfter, maxRetryAfter))
	}
	return d
}

func (s *Sender) ack(ctx context.Context, m jetstream.Msg) {
	// A confirmed ack: a lost one would send the event again (the
	// receiver dedups by webhook-id, but each resend is a wasted call).
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := m.DoubleAck(actx); err != nil {
		s.log.Warn("delivery: ack", "err", err)
	}
}

// deadLetterRetry is the wait before recording a dead letter again after
// the database refused it.
const deadLetterRetry = 30 * time.Second

// deadLetter records the event in the endpoint's error queue, then ends
// its delivery (Term). It reports false, the message untouched, when the
// insert failed.
func (s *Sender) deadLetter(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, n int, res result) bool {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := pgx.BeginFunc(dctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{
			Endpoint: s.e.Name, EventID: eventID(m, md), Subject: m.Subject(), StreamSeq: md.Sequence.Stream,
			Attempts: n, LastStatus: res.status, LastErrorClass: res.class, LastExcerpt: res.excerpt,
		})
		return tx.SendBatch(dctx, b).Close()
	})
	if err != nil {
		s.log.Error("delivery: record dead letter; retrying", "seq", md.Sequence.Stream, "retry_in", deadLetterRetry, "err", err)
		return false
	}
	s.log.Warn("delivery dead-lettered", "event_id", eventID(m, md), "attempts", n, "last_status", res.status, "error_class", res.class)
	if err := m.TermWithReason("delivery schedule spent"); err != nil {
		s.log.Warn("delivery: term", "err", err)
	}
	return true
}

// result is one attempt's outcome.
type result struct {
	status     int
	class      string
	excerpt    string
	retryAfter time.Duration
	duration   time.Duration
}

func (r result) success() bool { return r.status >= 200 && r.status < 300 && r.class == "" }

// attempt posts m once as attempt n and records it. ok is false when the
// sender is stopping (or a test dropped the message): the caller then
// leaves the message as it is.
func (s *Sender) attempt(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, n int) (result, bool) {
	if s.limiter != nil {
		if err := s.limiter.Wait(ctx); err != nil {
			return result{}, false
		}
		// The wait may have been long: restart the ack wait so the
		// attempt has its whole timeout before JetStream redelivers.
		_ = m.InProgress()
	}
	id := eventID(m, md)
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return result{}, false
	}
	res := s.post(ctx, m, id)
	<-s.slots
	if ctx.Err() != nil && res.class == "canceled" {
		return res, false
	}
	if h := s.hooks.afterSend; h != nil && h(id, res.status) {
		return res, false
	}
	if !res.success() && res.class == "" {
		res.class = "status"
	}
	s.rec.add(ctx, store.DeliveryAttempt{
		Endpoint: s.e.Name, EventID: id, Subject: m.Subject(), StreamSeq: md.Sequence.Stream, Attempt: n,
		StatusCode: res.status, ErrorClass: res.class, Excerpt: res.excerpt, Duration: res.duration,
	})
	return res, true
}

// post sends one signed request.
func (s *Sender) post(ctx context.Context, m jetstream.Msg, id string) result {
	body := m.Data()
	ts := time.Now()
	sigs := make([]string, 0, len(s.e.Secrets))
	for _, secret := range s.e.Secrets {
		sig, err := s.sign(secret, id, ts, body)
		if err != nil {
			// Validate checked the secrets' form; this is a bug, not input.
			return result{class: "sign"}
		}
		sigs = append(sigs, sig)
	}
	actx, cancel := context.WithTimeout(ctx, s.e.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, s.e.URL, bytes.NewReader(body))
	if err != nil {
		return result{class: "request"}
	}
	for k, v := range s.e.Headers {
		req.Header.Set(k, v)
	}
	ct := m.Headers().Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("User-Agent", userAgent)
	if tp := m.Headers().Get("traceparent"); tp != "" {
		req.Header.Set("traceparent", tp)
	}
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, strings.Join(sigs, " "))
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return result{class: errorClass(actx, err), duration: time.Since(start)}
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode, excerpt: readExcerpt(resp.Body)}
	res.duration = time.Since(start)
	if actx.Err() != nil {
		// The answer came but its body did not within the timeout.
		res.class = "timeout"
	}
	res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return res
}

// eventID is the webhook-id: the message's Nats-Msg-Id, which the relay
// sets to the outbox message's id, so every attempt and every redelivery
// carries the same one. A message published without one (not by the
// relay) gets one from its stream sequence, stable as well.
func eventID(m jetstream.Msg, md *jetstream.MsgMetadata) string {
	if id := m.Headers().Get(nats.MsgIdHdr); id != "" {
		return id
	}
	return "evt_seq_" + strconv.FormatUint(md.Sequence.Stream, 10)
}

// parseRetryAfter reads seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// sortHeld orders events by stream sequence.
func sortHeld(hs []*heldMsg) {
	slices.SortFunc(hs, func(a, b *heldMsg) int { return cmp.Compare(a.seq, b.seq) })
}
