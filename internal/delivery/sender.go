package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"golang.org/x/time/rate"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A sender delivers one endpoint's events on the instance that holds the
// endpoint's lease (manager.go). It reads the endpoint's durable on
// EVENTS and keeps in memory only what is in flight or waiting a moment
// for its turn: a delivery whose attempt failed moves to Postgres (its
// attempt count and next attempt, hookbridge.delivery_pending) and its
// message is acked, and on an ordered endpoint the later events of its
// key are parked there behind it. So a restart or another instance
// resumes each schedule where it was, a failing event holds no memory
// and no place in the durable's max ack pending, and a failing key never
// stops the endpoint's other keys. The body of a delivery Postgres
// tracks is read again from EVENTS by stream sequence when it is due (a
// requeued dead letter's from the dead letter).

// ConsumerName is the durable on EVENTS of endpoint name.
func ConsumerName(name string) string { return "delivery_" + name }

// ConsumerPrefix starts the name of every endpoint's durable.
const ConsumerPrefix = "delivery_"

const (
	// ackMargin is how much longer than one attempt's timeout a message
	// stays delivered to this sender before JetStream redelivers it: room
	// for recording the attempt and acking.
	ackMargin = 5 * time.Second
	// priorityGroup is the priority group every endpoint's reads use.
	priorityGroup = "delivery"
	// pinHeader carries the pin id on messages of a pinned priority group.
	pinHeader = "Nats-Pin-Id"
	// orderedWindow bounds the messages an ordered endpoint holds in
	// memory: in flight, or waiting for the event of their key in flight
	// before them (a failing key's wait in Postgres instead). A hot key
	// whose events fill it makes the endpoint's other keys wait until it
	// drains, as the consumer side's partition window does.
	orderedWindow = 256
	// breakerFailures is how many attempts in a row must fail before the
	// sender stops reading new events, so an endpoint that is down costs
	// one probe per probe interval, not an attempt and a Postgres row per
	// event: its new events wait in EVENTS, their schedules not started.
	breakerFailures = 5
	// keyNap is the longest a key's worker sleeps for the key's next
	// attempt; a longer wait leaves the key to the Postgres loop, so a
	// thousand keys waiting for hours hold no goroutine.
	keyNap = time.Second
	// gateLook bounds a pull's wait while a takeover gate is open, so it
	// is looked at often.
	gateLook = 500 * time.Millisecond
)

// item is one delivery the sender works on: a message JetStream holds
// for it (live), or a row Postgres tracks.
type item struct {
	seq     uint64
	key     string // ordered endpoints
	eventID string
	subject string
	// Live deliveries: the latest delivery of the message (replaced when
	// it is delivered again while held; guarded by Sender.mu), its
	// delivery count and the fence epoch it arrived in.
	msg   jetstream.Msg
	nd    uint64
	epoch uint64
	// touched is when the ack wait of msg last started afresh (its
	// delivery, or an in-progress sent for it).
	touched time.Time
	// row is the delivery's row when Postgres tracks it.
	row *store.DeliveryPending
	// attempts is how many attempts failed so far.
	attempts int
	// inflight: an attempt of it started and it is not settled yet.
	inflight bool
	// failed is an attempt's failure not yet written to Postgres (the
	// database was unreachable): it is written, not attempted again.
	failed *failure
}

// failure is an attempt's answer whose record is still to be written:
// a failed attempt (delay before the next), or the last one (dead).
type failure struct {
	n     int
	delay time.Duration
	res   result
	dead  bool
	pl    payload
}

// keyState is one key of an ordered endpoint.
type keyState struct {
	// mem are the key's live deliveries held here, by stream sequence.
	mem []*item
	// pg says the key may have rows in Postgres, which come before mem;
	// gen counts the times it was set, so a worker that found no rows
	// clears it only if nothing set it since.
	pg  bool
	gen uint64
	// running says a worker runs the key.
	running bool
}

// Sender delivers one endpoint's events.
type Sender struct {
	e       Endpoint
	m       *Manager
	log     *slog.Logger
	client  *http.Client
	cons    jetstream.Consumer
	ackWait time.Duration
	limiter *rate.Limiter // nil: no limit
	// rateAhead bounds what a rate-limited endpoint reads ahead: what the
	// rate sends in half an ack wait.
	rateAhead int
	slots     chan struct{} // Concurrency attempts in flight
	wakePG    chan struct{}
	roomCh    chan struct{}
	// leased reports whether this instance's lease on the endpoint still
	// allows starting an attempt.
	leased func() bool
	// reload: the endpoint's rows in Postgres changed elsewhere.
	reload atomic.Bool

	mu sync.Mutex
	// held are the live deliveries held here (in flight, waiting for a
	// slot or for their key, or staged behind a takeover gate), by
	// stream sequence.
	held map[uint64]*item
	// pgBusy are the Postgres rows being delivered (unordered).
	pgBusy map[uint64]bool
	// pgLooks counts the Postgres loop's looks; pgEnded is the look
	// during which each row's delivery last ended (unordered), so a look
	// whose read began before a row's end does not start it again.
	pgLooks uint64
	pgEnded map[uint64]uint64
	keys    map[string]*keyState
	// deadKeys are keys with a dead letter no later event has passed.
	deadKeys map[string]bool
	// epoch counts fences: a live delivery of an older epoch may have
	// gone to another reader and is never attempted here.
	epoch uint64
	// gated stages the live deliveries (buffer) of an ordered endpoint
	// until nothing older may be held elsewhere.
	gated     bool
	gateSince time.Time
	gateLog   bool
	buffer    []*item
	pin       string
	dseq      uint64
	fails     int       // attempts failed in a row
	probeAt   time.Time // the breaker's last probe
	failing   bool      // the endpoint's failing clock runs
	disabled  bool
	stopping  bool

	// clockMu orders the writes of the endpoint's failing clock, so a
	// failure's write never lands after a later success's clear;
	// clockSet says the database's clock may run (this sender started
	// it, found it running, or could not stop it): a success clears it
	// until a clear succeeds.
	clockMu  sync.Mutex
	clockSet bool
}

func newSender(m *Manager, e Endpoint, leased func() bool) *Sender {
	s := &Sender{
		e: e, m: m, log: m.log.With("endpoint", e.Name), ackWait: e.Timeout + ackMargin, leased: leased,
		slots: make(chan struct{}, e.Concurrency), wakePG: make(chan struct{}, 1), roomCh: make(chan struct{}, 1),
		held: map[uint64]*item{}, pgBusy: map[uint64]bool{}, pgEnded: map[uint64]uint64{}, keys: map[string]*keyState{}, deadKeys: map[string]bool{},
	}
	s.client = m.client(e)
	if e.Rate > 0 {
		// A burst of one: the partner's limit is a rate, not a bucket we
		// may empty at once after a quiet minute.
		s.limiter = rate.NewLimiter(rate.Limit(e.Rate), 1)
		// Empty at the start: the previous reader (another instance, or
		// this one before a restart) may have sent a moment ago, and the
		// limit holds across a handover only if the first request here
		// waits one interval of the rate.
		s.limiter.AllowN(time.Now(), 1)
		s.rateAhead = max(1, int(e.Rate*s.ackWait.Seconds()/2))
	}
	return s
}

// maxAckPending is the durable's bound on messages out at once: what the
// reader holds, and as much again for a reader that died holding it
// (until its ack wait runs out). Failing deliveries are not among them:
// they are in Postgres.
func (s *Sender) maxAckPending() int {
	if s.e.Ordered {
		return 2 * max(orderedWindow, s.e.Concurrency)
	}
	return max(64, 4*s.e.Concurrency)
}

// durableConfig is the endpoint's durable: a pinned priority group, so
// JetStream delivers to one reader at a time, besides the lease.
func (s *Sender) durableConfig(disabled bool) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:        ConsumerName(s.e.Name),
		Description:    "hookbridge delivery to endpoint " + s.e.Name,
		FilterSubjects: s.e.Subjects,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        s.ackWait,
		// Attempts are counted and ended by the sender (the schedule,
		// then a dead letter); the server never drops one.
		MaxDeliver:     -1,
		MaxAckPending:  s.maxAckPending(),
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{priorityGroup},
		PinnedTTL:      s.m.t.pinnedTTL,
		Metadata:       map[string]string{"hookbridge.endpoint": s.e.Name},
	}
	if disabled {
		until := pausedUntil()
		cfg.PauseUntil = &until
	}
	return cfg
}

// pausedUntil is how long a disabled endpoint's durable is paused: until
// it is enabled (a century stands for that).
func pausedUntil() time.Time { return time.Now().AddDate(100, 0, 0).UTC() }

// ensure creates or updates the endpoint's durable. A new durable starts
// with the events published after it: an endpoint added today is not
// sent yesterday's events.
func (s *Sender) ensure(ctx context.Context) error {
	cons, err := s.m.opts.JS.CreateOrUpdateConsumer(ctx, stream.Events, s.durableConfig(false))
	if err != nil {
		return fmt.Errorf("delivery %s: consumer %s on %s: %w", s.e.Name, ConsumerName(s.e.Name), stream.Events, err)
	}
	s.cons = cons
	return nil
}

// run delivers until ctx ends, then stops reading, lets the attempts in
// flight end (each bounded by the endpoint's timeout), hands back what it
// holds (naks, in stream order) and gives its pin up.
func (s *Sender) run(ctx context.Context) {
	if !s.load(ctx) {
		return
	}
	var work conc.WaitGroup
	work.Go(func() { s.heartbeat(ctx) })
	work.Go(func() { s.pgLoop(ctx, &work) })
	s.read(ctx, &work)
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	work.Wait()
	s.drain()
}

// load reads what Postgres says of the endpoint before anything is read:
// the keys with deliveries in Postgres (their later events wait behind
// those), the keys with an unpassed dead letter, whether it is failing.
// It retries until it succeeds or ctx ends (false).
func (s *Sender) load(ctx context.Context) bool {
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := s.loadOnce(ctx)
		if err == nil {
			return true
		}
		s.log.Warn("delivery: read the endpoint's state; retrying", "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return false
		}
	}
}

func (s *Sender) loadOnce(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	pool, name := s.m.opts.Pool, s.e.Name
	var pgKeys, dead []string
	if !s.e.Ordered {
		// Parked behind their key while the endpoint was ordered: due now.
		if err := store.DeliveryPendingUnpark(ctx, pool, name); err != nil {
			return fmt.Errorf("unpark: %w", err)
		}
	}
	if s.e.Ordered {
		var err error
		if pgKeys, err = store.DeliveryPendingKeys(ctx, pool, name); err != nil {
			return fmt.Errorf("pending keys: %w", err)
		}
		if dead, err = store.DeliveryDeadLetterKeys(ctx, pool, name); err != nil {
			return fmt.Errorf("dead letter keys: %w", err)
		}
	}
	rows, err := store.DeliveryEndpointList(ctx, pool)
	if err != nil {
		return fmt.Errorf("endpoint state: %w", err)
	}
	// Disabled between the beat that started this sender and ensure's
	// update, which carries no pause (an update without one resumes the
	// durable): paused again, and this sender attempts nothing; the next
	// beat stops it.
	if slices.ContainsFunc(rows, func(r store.DeliveryEndpoint) bool { return r.Name == name && r.State == store.DeliveryDisabled }) {
		if err := pauseDurable(ctx, s.m.opts.JS, name); err != nil {
			return fmt.Errorf("pause the disabled endpoint's durable: %w", err)
		}
		s.mu.Lock()
		s.disabled = true
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range pgKeys {
		ks := s.keyLocked(k)
		ks.pg = true
		ks.gen++
	}
	for _, k := range dead {
		s.deadKeys[k] = true
	}
	for _, r := range rows {
		if r.Name == name {
			s.failing = r.FailingSince != nil
			s.clockMu.Lock()
			s.clockSet = s.failing
			s.clockMu.Unlock()
		}
	}
	return nil
}

// poked is called when the endpoint's rows in Postgres changed
// elsewhere (a requeue, a replay): the Postgres loop reads its keys again
// and looks at once.
func (s *Sender) poked() {
	s.reload.Store(true)
	poke(s.wakePG)
}

// reloadKeys reads again which keys have rows in Postgres (ordered).
func (s *Sender) reloadKeys(ctx context.Context) error {
	if !s.e.Ordered || !s.reload.Swap(false) {
		return nil
	}
	keys, err := store.DeliveryPendingKeys(ctx, s.m.opts.Pool, s.e.Name)
	if err != nil {
		s.reload.Store(true)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		ks := s.keyLocked(k)
		if !ks.pg {
			ks.pg = true
			ks.gen++
		}
	}
	return nil
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits d, or less when ctx ends first (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// keyOf is a message's ordering key on an ordered endpoint.
func (s *Sender) keyOf(h nats.Header, subject string) string { return endpointKey(&s.e, h, subject) }

func (s *Sender) keyLocked(k string) *keyState {
	ks := s.keys[k]
	if ks == nil {
		ks = &keyState{}
		s.keys[k] = ks
	}
	return ks
}

// heartbeat keeps every live delivery held here delivered to this sender:
// three InProgress per ack wait, so one lost to a slow moment does not
// let it expire.
func (s *Sender) heartbeat(ctx context.Context) {
	t := time.NewTicker(s.ackWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		msgs := make([]jetstream.Msg, 0, len(s.held))
		for _, it := range s.held {
			msgs = append(msgs, it.msg)
			it.touched = now
		}
		s.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress()
		}
	}
}

// release forgets a live delivery held here (before its ack, nak or term
// leaves: a takeover gate counts what is held here against what
// JetStream counts unacked, and must never see fewer unacked than held)
// and returns its latest message, nil when it was not held (a fence
// dropped it).
func (s *Sender) release(it *item) jetstream.Msg {
	if it.msg == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[it.seq] != it {
		return nil
	}
	delete(s.held, it.seq)
	poke(s.roomCh)
	return it.msg
}

// ack acks a delivery held here, confirmed: a lost ack would send the
// event again (the receiver dedups by webhook-id, but each resend is a
// wasted call).
func (s *Sender) ack(it *item) {
	m := s.release(it)
	if m == nil {
		return
	}
	actx, cancel := context.WithTimeout(s.m.hard, 5*time.Second)
	defer cancel()
	if err := m.DoubleAck(actx); err != nil {
		s.log.Warn("delivery: ack", "seq", it.seq, "err", err)
	}
}

// nak hands a live delivery back to JetStream, after delay.
func (s *Sender) nak(it *item, delay time.Duration) {
	m := s.release(it)
	if m == nil || s.m.abandoned() {
		return
	}
	if err := m.NakWithDelay(delay); err != nil {
		s.log.Debug("delivery: nak", "seq", it.seq, "err", err)
	}
}

// drain hands back, in stream order, what is still held once the
// workers are done, and gives the pin up so the next reader gets it now.
func (s *Sender) drain() {
	s.mu.Lock()
	items := make([]*item, 0, len(s.held))
	for _, it := range s.held {
		items = append(items, it)
	}
	s.mu.Unlock()
	slices.SortFunc(items, func(a, b *item) int { return cmp.Compare(a.seq, b.seq) })
	for _, it := range items {
		s.nak(it, 0)
	}
	s.unpin()
}

// unpin gives the durable's pin up when this sender holds it, so the
// next reader is pinned at once rather than after the pin's TTL.
func (s *Sender) unpin() {
	s.mu.Lock()
	pin := s.pin
	s.mu.Unlock()
	if pin == "" || s.cons == nil || s.m.abandoned() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := s.cons.Info(ctx)
	if err != nil || !slices.ContainsFunc(info.PriorityGroups, func(pg jetstream.PriorityGroupState) bool { return pg.PinnedClientID == pin }) {
		return
	}
	st, err := s.m.opts.JS.Stream(ctx, stream.Events)
	if err != nil {
		return
	}
	if err := st.UnpinConsumer(ctx, ConsumerName(s.e.Name), priorityGroup); err != nil {
		s.log.Debug("delivery: unpin", "err", err)
	}
}

// mayStartLocked says whether an attempt of it may start now: the
// sender is not stopping, the endpoint is enabled, the lease allows it,
// and a live delivery was not fenced off.
func (s *Sender) mayStartLocked(ctx context.Context, it *item) bool {
	return ctx.Err() == nil && !s.stopping && !s.disabled && s.leased() && (it.msg == nil || it.epoch == s.epoch)
}

var errGone = errors.New("the event is no longer in EVENTS")
