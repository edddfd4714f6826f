package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/sourcegraph/conc"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// One reader per endpoint, across instances. Every instance running the
// delivery role announces itself in hookbridge.delivery_instances every
// beat and spreads the configured endpoints over the instances seen
// lately, each endpoint to the instance that ranks it highest among
// those below their share (the consumer side's rule for partitions), so
// every instance computes the same assignment. An instance reads an
// endpoint only while it holds the endpoint's lease in
// hookbridge.delivery_endpoints: it renews the leases of its share every
// beat and takes those of its share nobody holds; it gives up the ones
// no longer its share after its sender for them stopped (their in-flight
// attempts over, what it held handed back), and the next instance takes
// them at once (a notification wakes it). An instance that cannot renew
// (Postgres unreachable) starts no attempt once its last renewal is older
// than the lease less the endpoint's timeout (and a margin): its attempts
// in flight end before the lease does, so the next owner never overlaps
// it, and the endpoint's rate limit and concurrency hold whatever the
// number of instances. The writes a sender makes after a failure check
// the lease in their own statement, so a late one is refused, not seen
// by nobody. The endpoint's durable also pins one reader at a time
// (reader.go), a second line behind the lease.
//
// A killed instance's endpoints move when its lease runs out: the lease
// is the longest endpoint timeout plus leaseMargin (25 s with the
// defaults), and the next beat of the instance whose share they become
// takes them (every 2 s). An ordered endpoint then waits for what the
// killed reader held to come back (its ack wait from its last
// InProgress, which is over by then).

// Timings of the delivery role.
type timings struct {
	// pullWait is how long a pull waits for messages; pinnedTTL how long
	// the durable's pin outlives its reader's last pull (3 pulls).
	pullWait, pinnedTTL time.Duration
	// beat is how often an instance announces itself and renews its
	// leases; memberTTL how long an instance counts after its last beat.
	beat, memberTTL time.Duration
	// leaseMargin is added to the longest endpoint timeout to make the
	// lease; actMargin is kept between an instance's last attempt start
	// and the end of its lease, besides the timeout.
	leaseMargin, actMargin time.Duration
	// pgPoll is the longest the Postgres loop sleeps; probeMin the
	// shortest interval between a failing endpoint's probes.
	pgPoll, probeMin time.Duration
	// prepare is the wait before trying again a delivery that could not
	// be prepared (its body or its state could not be read) or whose
	// record could not be written.
	prepare time.Duration
}

func defaultTimings() timings {
	return timings{pullWait: 5 * time.Second, pinnedTTL: 15 * time.Second, beat: 2 * time.Second, memberTTL: 10 * time.Second,
		leaseMargin: 10 * time.Second, actMargin: 2 * time.Second, pgPoll: 30 * time.Second, probeMin: time.Second,
		prepare: 5 * time.Second}
}

// Options configure a [Manager].
type Options struct {
	Endpoints []Endpoint
	JS        jetstream.JetStream
	Pool      *pgxpool.Pool
	Sign      Signer
	// Tracer observes attempts, dead letters and state changes (nil:
	// nothing).
	Tracer Tracer
	Logger *slog.Logger
	// Client returns an endpoint's HTTP client (nil: [NewClient]).
	Client func(Endpoint) *http.Client
	// Instance names this instance (default: a random id).
	Instance string

	t     *timings
	hooks testHooks
}

type testHooks struct {
	// beforeSend runs before a request is made; an error is a failure
	// before the send: nothing is sent, the delivery waits and is tried
	// again later.
	beforeSend func(eventID string) error
	// afterSend runs after an attempt's answer came and before anything
	// is recorded or acked; true drops the delivery there, as a crash
	// would.
	afterSend func(eventID string, status int) bool
	// mayStart runs when an attempt is about to start, once its slot
	// and the rate limiter let it go; false stops it there, as a lease
	// that lapsed would (nothing is sent).
	mayStart func(eventID string) bool
	// afterDeadLetter runs after a dead letter is committed and before
	// its message is terminated; true drops the delivery there, as a
	// crash would.
	afterDeadLetter func(eventID string) bool
	// gateInfo runs in a takeover gate's look just before it asks
	// JetStream how many messages are unacked.
	gateInfo func()
}

// Manager runs the delivery role of one instance: the senders of the
// endpoints this instance reads (docs/DELIVERY.md).
type Manager struct {
	opts   Options
	id     string
	log    *slog.Logger
	tracer Tracer
	t      timings
	hooks  testHooks
	rec    *recorder
	names  []string
	// leaseTTL is the lease every endpoint is held for.
	leaseTTL time.Duration
	// hard is the context attempts and their records run in: it outlives
	// a stop (what started is finished) and ends with a kill.
	hard    context.Context
	kill    context.CancelFunc
	abandon atomic.Bool
	wake    chan struct{}

	evMu sync.Mutex
	ev   jetstream.Stream

	mu      sync.Mutex
	renewed map[string]time.Time // last renewal of each endpoint's lease, by this instance
	running map[string]*senderRun
	paused  map[string]bool // disabled endpoints whose durable this instance paused
	// handovers are the stops under way (each releases its lease when
	// its sender is done).
	handovers conc.WaitGroup
}

type senderRun struct {
	s      *Sender
	cancel context.CancelFunc
	done   chan struct{}
	// leaving: stopped because it is no longer this instance's share;
	// its lease is released once it is done.
	leaving bool
}

// NewManager validates the endpoints and returns the manager of their
// delivery on this instance.
func NewManager(opts Options) (*Manager, error) {
	if opts.JS == nil || opts.Pool == nil || opts.Sign == nil {
		return nil, errors.New("delivery: needs JetStream, a database pool and a signer")
	}
	m := &Manager{opts: opts, id: opts.Instance, log: opts.Logger, tracer: opts.Tracer, t: defaultTimings(), hooks: opts.hooks,
		wake: make(chan struct{}, 1), renewed: map[string]time.Time{}, running: map[string]*senderRun{}, paused: map[string]bool{}}
	if opts.t != nil {
		m.t = *opts.t
	}
	if m.id == "" {
		m.id = nuid.Next()
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.log = m.log.With("component", "delivery")
	if m.tracer == nil {
		m.tracer = nopTracer{}
	}
	seen := map[string]bool{}
	var longest time.Duration
	for i, e := range opts.Endpoints {
		e = e.WithDefaults()
		if err := e.Validate(); err != nil {
			return nil, err
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("delivery: endpoint %s is declared twice", e.Name)
		}
		seen[e.Name] = true
		m.opts.Endpoints[i] = e
		m.names = append(m.names, e.Name)
		longest = max(longest, e.Timeout)
	}
	m.opts.Endpoints = slices.Clone(m.opts.Endpoints)
	m.leaseTTL = longest + m.t.leaseMargin
	m.rec = newRecorder(opts.Pool, m.log)
	m.hard, m.kill = context.WithCancel(context.Background())
	return m, nil
}

// ID is this instance's id among the delivery instances.
func (m *Manager) ID() string { return m.id }

// Endpoints are the configured endpoints, defaults applied.
func (m *Manager) Endpoints() []Endpoint { return slices.Clone(m.opts.Endpoints) }

func (m *Manager) client(e Endpoint) *http.Client {
	if m.opts.Client != nil {
		return m.opts.Client(e)
	}
	return NewClient(e)
}

func (m *Manager) abandoned() bool { return m.abandon.Load() }

// events is the EVENTS stream's handle, for reading an event again by
// sequence.
func (m *Manager) events(ctx context.Context) (jetstream.Stream, error) {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	if m.ev != nil {
		return m.ev, nil
	}
	st, err := m.opts.JS.Stream(ctx, stream.Events)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream.Events, err)
	}
	m.ev = st
	return st, nil
}

// Run delivers until ctx ends. Then each sender stops reading, lets its
// attempts in flight end (bounded by the endpoint's timeout) and hands
// back what it holds; the leases are given up and the instance leaves,
// so the other instances take its endpoints at once. It returns nil.
func (m *Manager) Run(ctx context.Context) error {
	if len(m.names) == 0 {
		<-ctx.Done()
		return nil
	}
	defer m.kill()
	recCtx, recStop := context.WithCancel(m.hard)
	var bg conc.WaitGroup
	bg.Go(func() { m.rec.run(recCtx) })
	defer func() { recStop(); bg.Wait() }()
	listenCtx, listenStop := context.WithCancel(ctx)
	defer listenStop()
	bg.Go(func() { m.listen(listenCtx) })
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := store.DeliveryEndpointEnsure(ctx, m.opts.Pool, m.names)
		if err == nil {
			break
		}
		m.log.Warn("delivery: record the configured endpoints; retrying", "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return nil
		}
	}
	m.createDurables(ctx)
	m.reportOrphans(ctx)
	orphanTick := time.NewTicker(10 * time.Minute)
	defer orphanTick.Stop()
	beat := time.NewTicker(m.t.beat)
	defer beat.Stop()
	warned := false
	for {
		if err := m.beat(ctx); err != nil && ctx.Err() == nil {
			if !warned {
				m.log.Warn("delivery: renew the endpoint leases; its endpoints stop when their leases run out", "err", err)
				warned = true
			}
		} else {
			warned = false
		}
		select {
		case <-ctx.Done():
			m.stop()
			return nil
		case <-beat.C:
		case <-m.wake:
		case <-orphanTick.C:
			m.reportOrphans(ctx)
		}
	}
}

// CreateDurables creates the durables of the endpoints that have none
// yet, whichever instance reads them, so that a new endpoint's events
// are those published from the start of the first instance that knows it
// (a durable starts with the events published after it is created). An
// existing durable is left to the endpoint's reader to update. serve calls
// it before its relay starts and before it reports ready, on every
// instance running the relay or the delivery role: an event the relay
// published before the durable existed would never reach the endpoint.
// Run calls it too.
func (m *Manager) CreateDurables(ctx context.Context) { m.createDurables(ctx) }

func (m *Manager) createDurables(ctx context.Context) {
	states := map[string]string{}
	if rows, err := store.DeliveryEndpointList(ctx, m.opts.Pool); err == nil {
		for _, r := range rows {
			states[r.Name] = r.State
		}
	}
	for _, e := range m.opts.Endpoints {
		_, err := m.opts.JS.Consumer(ctx, stream.Events, ConsumerName(e.Name))
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		cfg := newSender(m, e, nil).durableConfig(states[e.Name] == store.DeliveryDisabled)
		if _, err := m.opts.JS.CreateConsumer(ctx, stream.Events, cfg); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			m.log.Warn("delivery: create an endpoint's durable; its reader will", "endpoint", e.Name, "err", err)
		}
	}
}

// beat announces this instance, renews and takes its share of leases,
// and starts and stops senders to match.
func (m *Manager) beat(runCtx context.Context) error {
	ctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
	defer cancel()
	sent := time.Now()
	pool := m.opts.Pool
	host, _ := os.Hostname()
	if err := store.DeliveryInstanceBeat(ctx, pool, store.DeliveryInstance{ID: m.id, Host: host, PID: os.Getpid(), Endpoints: m.names}); err != nil {
		m.lapse()
		return fmt.Errorf("announce: %w", err)
	}
	members, err := store.DeliveryInstanceList(ctx, pool, m.t.memberTTL)
	if err != nil {
		m.lapse()
		return fmt.Errorf("list instances: %w", err)
	}
	want := assign(members, m.id, m.names)
	slices.Sort(want)
	// A sender that is leaving keeps its lease until it is done; the
	// others of this instance's share are renewed or taken.
	m.mu.Lock()
	renew := make([]string, 0, len(want))
	for _, n := range want {
		if r := m.running[n]; r == nil || !r.leaving {
			renew = append(renew, n)
		}
	}
	m.mu.Unlock()
	// Only while NATS is reachable: an instance that cannot read lets
	// its endpoints go to one that can, once their leases run out (a
	// reconnect of a moment changes nothing).
	if !m.opts.JS.Conn().IsConnected() {
		m.lapse()
		return errors.New("NATS is not connected: the leases are not renewed")
	}
	leases, err := store.DeliveryEndpointLease(ctx, pool, m.id, renew, m.leaseTTL)
	if err != nil {
		m.lapse()
		return fmt.Errorf("leases: %w", err)
	}
	held := map[string]string{}
	m.mu.Lock()
	before := make(map[string]bool, len(m.renewed))
	for name := range m.renewed {
		before[name] = true
	}
	for _, l := range leases {
		held[l.Name] = l.State
		m.renewed[l.Name] = sent
	}
	for name := range m.renewed {
		if _, ok := held[name]; !ok {
			delete(m.renewed, name)
		}
	}
	m.mu.Unlock()
	wanted := map[string]bool{}
	for _, n := range want {
		wanted[n] = true
	}
	for _, e := range m.opts.Endpoints {
		state, ok := held[e.Name]
		switch {
		case ok && state == store.DeliveryEnabled && m.senderDisabled(e.Name):
			// Disabled by its own sender (auto-disable) and enabled again
			// before a beat saw it disabled: that sender attempts nothing
			// any more, so it goes, and the next beat starts a new one.
			delete(m.paused, e.Name)
			m.stopSender(e.Name, false)
		case ok && state == store.DeliveryEnabled:
			delete(m.paused, e.Name)
			m.start(runCtx, e)
		case ok:
			m.stopSender(e.Name, false)
			if !m.paused[e.Name] && pauseDurable(ctx, m.opts.JS, e.Name) == nil {
				m.paused[e.Name] = true
			}
		case !wanted[e.Name]:
			// Not this instance's share: handed over once its sender is
			// done.
			if !m.stopSender(e.Name, true) && before[e.Name] {
				m.release(e.Name)
			}
		default:
			m.stopSender(e.Name, false) // the lease is another's, or lapsed
		}
	}
	return nil
}

// lapse stops the senders whose lease may have run out: their last
// renewal is older than the lease.
func (m *Manager) lapse() {
	m.mu.Lock()
	var stale []string
	for name, at := range m.renewed {
		if time.Since(at) > m.leaseTTL {
			stale = append(stale, name)
		}
	}
	m.mu.Unlock()
	for _, name := range stale {
		m.stopSender(name, false)
	}
}

// leased reports whether this instance may start an attempt to e: its
// last renewal of e's lease leaves room for the attempt to end before
// the lease does.
func (m *Manager) leased(e Endpoint) func() bool {
	window := m.leaseTTL - e.Timeout - m.t.actMargin
	return func() bool {
		m.mu.Lock()
		at, ok := m.renewed[e.Name]
		m.mu.Unlock()
		return ok && time.Since(at) < window
	}
}

// start runs e's sender unless it runs.
func (m *Manager) start(ctx context.Context, e Endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running[e.Name] != nil {
		return
	}
	s := newSender(m, e, m.leased(e))
	sctx, cancel := context.WithCancel(ctx)
	r := &senderRun{s: s, cancel: cancel, done: make(chan struct{})}
	m.running[e.Name] = r
	go func() {
		defer close(r.done)
		s.run(sctx)
	}()
	m.log.Info("delivery: reading endpoint", "endpoint", e.Name, "instance", m.id)
}

// senderDisabled reports whether name's running sender disabled its
// endpoint itself.
func (m *Manager) senderDisabled(name string) bool {
	m.mu.Lock()
	r := m.running[name]
	m.mu.Unlock()
	if r == nil {
		return false
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.disabled
}

// stopSender stops name's sender (gracefully: what started ends, what is
// held is handed back) without waiting, and reports whether one runs.
// handOver releases the lease once it is done, so the instance whose
// share it is takes it at once.
func (m *Manager) stopSender(name string, handOver bool) bool {
	m.mu.Lock()
	r := m.running[name]
	if r == nil || r.leaving {
		m.mu.Unlock()
		return r != nil
	}
	r.leaving = true
	m.mu.Unlock()
	r.cancel()
	m.handovers.Go(func() {
		<-r.done
		m.mu.Lock()
		if m.running[name] == r {
			delete(m.running, name)
		}
		m.mu.Unlock()
		if handOver {
			m.release(name)
		}
		m.log.Info("delivery: stopped reading endpoint", "endpoint", name, "instance", m.id)
		poke(m.wake)
	})
	return true
}

// release gives up this instance's lease on name (when it holds it).
func (m *Manager) release(name string) {
	m.mu.Lock()
	delete(m.renewed, name)
	m.mu.Unlock()
	if m.abandoned() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := store.DeliveryEndpointRelease(ctx, m.opts.Pool, m.id, []string{name}); err != nil {
		m.log.Warn("delivery: release an endpoint's lease (it runs out by itself)", "endpoint", name, "err", err)
	}
}

// stop stops every sender, waits for them, gives the leases up and
// leaves the instances.
func (m *Manager) stop() {
	m.mu.Lock()
	runs := make([]*senderRun, 0, len(m.running))
	for _, r := range m.running {
		runs = append(runs, r)
		r.leaving = true
	}
	m.mu.Unlock()
	for _, r := range runs {
		r.cancel()
	}
	for _, r := range runs {
		<-r.done
	}
	m.handovers.Wait()
	if m.abandoned() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := store.DeliveryEndpointRelease(ctx, m.opts.Pool, m.id, m.names); err != nil {
		m.log.Warn("delivery: release the endpoint leases (they run out by themselves)", "err", err)
	}
	if err := store.DeliveryInstanceDelete(ctx, m.opts.Pool, m.id); err != nil {
		m.log.Debug("delivery: leave the instances", "err", err)
	}
}

// listen wakes the beat, and the endpoint's sender, on every
// notification of an endpoint's change (its state, a released lease, a
// requeue or a replay), and after every (re)connect, since notifications
// sent while it was down are lost.
func (m *Manager) listen(ctx context.Context) {
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			c, err := m.opts.Pool.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return c.Hijack(), nil
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				m.log.Debug("delivery: listen for endpoint changes; reconnecting", "err", err)
			}
		},
		ReconnectDelay: time.Second,
	}
	l.Handle(store.DeliveryNotifyChannel, notifyHandler{m: m})
	_ = l.Listen(ctx) // returns only when ctx is done
}

type notifyHandler struct{ m *Manager }

func (h notifyHandler) HandleNotification(ctx context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	poke(h.m.wake)
	h.m.mu.Lock()
	r := h.m.running[n.Payload]
	h.m.mu.Unlock()
	if r != nil {
		r.s.poked()
	}
	return nil
}

// HandleBacklog runs after LISTEN succeeds: whatever changed while no one
// listened is picked up by a beat and a look of every sender.
func (h notifyHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	poke(h.m.wake)
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	for _, r := range h.m.running {
		r.s.poked()
	}
	return nil
}

// reportOrphans logs the durables on EVENTS of endpoints no longer
// configured (a renamed or removed endpoint): they keep every event
// they have not acked, and a renamed endpoint starts at new events.
func (m *Manager) reportOrphans(ctx context.Context) {
	orphans, err := Orphans(ctx, m.opts.JS, m.names)
	if err != nil || len(orphans) == 0 {
		return
	}
	m.log.Warn("delivery: durables on EVENTS of endpoints no longer configured; delete them with `nats consumer rm EVENTS NAME` "+
		"(a renamed endpoint reads from its new durable, starting at new events)", "durables", orphans)
}

// PoolConnections is how many Postgres connections the delivery role of
// an instance with n endpoints wants in its pool: one held by the
// listener, one for the beat, one for the recorder's batches of attempt
// rows, and one per four endpoints for the off-happy-path statements (a
// failed attempt's record, a dead letter, the deliveries Postgres tracks
// coming due), which are short; the happy path uses none but the
// recorder's.
func PoolConnections(n int) int {
	if n == 0 {
		return 0
	}
	return 3 + max(2, (n+3)/4)
}
