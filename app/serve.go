package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/internal/admin/console"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

// Roles a serve process can run.
const (
	RoleIngress  = "ingress"
	RoleConsumer = "consumer"
	RoleRelay    = "relay"
	RoleAll      = "all"
)

// Server is a running hookbridge process: the parts selected by its roles.
type Server struct {
	cfg      Config
	handlers Handlers
	roles    map[string]bool
	log      *slog.Logger

	embedded *server.Server
	// opsEndpoint is what serve wrote to data_dir/ops.json for the
	// operator commands (embedded server only).
	opsEndpoint *OpsEndpoint
	nc          *nats.Conn
	js          jetstream.JetStream
	pool        *pgxpool.Pool
	httpSrv     *http.Server
	listener    net.Listener
	// tel holds the metrics, the tracer and the consumers' readiness
	// (metrics.go, tracing.go).
	tel             telemetry
	metricsListener net.Listener
	adminListener   net.Listener
	// console is the operator console served at / on the admin listener.
	console fs.FS
	// failure is the first part that failed for good (see goRole).
	failure atomic.Pointer[error]
	// guardInterval is how often the storage guard looks (0: every 5s).
	guardInterval time.Duration
	// storeMax is the JetStream storage the server gives this deployment
	// (0: not known), hooksBound and eventsBound the byte bounds HOOKS and
	// EVENTS got (-1: none); all are set by ensureStreams.
	storeMax    int64
	hooksBound  int64
	eventsBound int64
}

// NewServer prepares a server; [Server.Run] starts it.
func NewServer(cfg Config, handlers Handlers, roles []string, logger *slog.Logger) (*Server, error) {
	s := &Server{cfg: cfg, handlers: WithSelftest(cfg, handlers), roles: map[string]bool{}, log: logger, console: console.FS}
	if len(roles) == 0 {
		roles = []string{RoleAll}
	}
	for _, r := range roles {
		switch r {
		case RoleAll:
			s.roles[RoleIngress], s.roles[RoleConsumer], s.roles[RoleRelay] = true, true, true
			if len(cfg.Delivery.Endpoints) > 0 {
				s.roles[RoleDelivery] = true
			}
		case RoleIngress, RoleConsumer, RoleRelay, RoleDelivery:
			s.roles[r] = true
		default:
			return nil, fmt.Errorf("role %q: use ingress, consumer, relay, delivery or all", r)
		}
	}
	if cfg.Relay.Disabled {
		delete(s.roles, RoleRelay)
	}
	return s, nil
}

// connectNATS connects to the configured NATS, or starts the embedded
// server when no URL is set.
func (s *Server) connectNATS() error {
	var err error
	if s.cfg.NATSURL == "" {
		user, password, err := newOpsCredentials()
		if err != nil {
			return err
		}
		// Loopback only, random port, this run's password: for the
		// operator commands of this machine's user (see opsendpoint.go).
		sync := s.cfg.EmbeddedNATS.SyncInterval.OrDefault()
		s.embedded, err = embedded.Start(embedded.Options{StoreDir: filepath.Join(s.cfg.DataDir, "jetstream"),
			MaxPayload: s.cfg.NATSMaxPayload(), Listen: true, Host: "127.0.0.1", Port: -1, User: user, Password: password,
			SyncAlways: sync.Always, SyncInterval: sync.Every})
		if err != nil {
			return err
		}
		s.nc, err = embedded.Connect(s.embedded, nats.UserInfo(user, password))
		if err == nil {
			ep := OpsEndpoint{URL: s.embedded.ClientURL(), User: user, Password: password}
			if err = writeOpsEndpoint(s.cfg.DataDir, ep); err == nil {
				s.opsEndpoint = &ep
			}
		}
		if err != nil {
			s.closeNATS() // Run only closes what connected
			return err
		}
	} else {
		if !s.cfg.EmbeddedNATS.SyncInterval.IsZero() {
			s.log.Warn("embedded_nats.sync_interval applies to the embedded server only; with nats_url, the server's own jetstream sync_interval (and R3 streams) decide what a host crash loses",
				"sync_interval", s.cfg.EmbeddedNATS.SyncInterval.String())
		}
		s.nc, err = nats.Connect(s.cfg.NATSURL,
			nats.Name("hookbridge"),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				// err is nil when the connection was closed on purpose
				// (shutdown): nothing to warn about.
				if err != nil {
					s.log.Warn("nats disconnected", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { s.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }))
	}
	if err != nil {
		return fmt.Errorf("connect nats: %w", err)
	}
	s.js, err = jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}

// adoptPartitions makes an unset streams.partitions the number HOOKS
// was created with, so that a deployment keeps its partitions when the
// default changes; a stream without a record gets the default.
func (s *Server) adoptPartitions(ctx context.Context) error {
	if s.cfg.Streams.Partitions > 0 {
		return nil
	}
	n, err := stream.PartitionCount(ctx, s.js)
	if err != nil || n == 0 {
		return err
	}
	s.cfg.Streams.Partitions = n
	if n != stream.DefaultPartitions {
		s.log.Info("streams.partitions unset: using the number HOOKS was created with", "partitions", n)
	}
	return nil
}

func (s *Server) streamOptions() stream.Options {
	return stream.Options{
		Replicas:        s.cfg.Streams.Replicas,
		DuplicateWindow: s.cfg.Streams.DuplicateWindow,
		MaxAge:          s.cfg.Streams.MaxAge,
		MaxBytes:        s.cfg.Streams.MaxBytes,
		StoreMax:        s.storeMax,
		Partitions:      s.cfg.Streams.PartitionsOrDefault(),
		Delivery:        len(s.cfg.Delivery.Endpoints) > 0,
		EventsAge:       s.cfg.Streams.EventsMaxAge,
	}
}

// readStoreMax is the JetStream storage the server gives this deployment,
// 0 when it does not say: the embedded server's store limit (which
// nats-server sets to 75% of the disk's free space at start), else the
// account's storage limit (an external server without account limits
// says nothing, and a user may not be allowed to ask). HOOKS's default
// byte bound is a share of it.
func (s *Server) readStoreMax(ctx context.Context) int64 {
	if s.embedded != nil {
		if c := s.embedded.JetStreamConfig(); c != nil && c.MaxStore > 0 {
			return c.MaxStore
		}
		return 0
	}
	ai, err := s.js.AccountInfo(ctx)
	if err != nil {
		s.log.Debug("jetstream account info unavailable; HOOKS's default byte bound does not know the store's size", "err", err)
		return 0
	}
	return max(ai.Limits.MaxStore, 0)
}

// Addr is the HTTP listen address once Run has started listening.
func (s *Server) Addr() string {
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// NATS is the server's NATS connection once Run has connected (nil
// before), for programs embedding hookbridge that publish or subscribe
// next to it.
func (s *Server) NATS() *nats.Conn { return s.nc }

// JetStream is the server's JetStream client once Run has connected (nil
// before).
func (s *Server) JetStream() jetstream.JetStream { return s.js }

// Run starts every role and blocks until ctx is cancelled; then it stops
// intake, lets in-flight work finish and returns.
func (s *Server) Run(ctx context.Context, ready func(addr string)) error {
	stopTelemetry, err := s.startTelemetry(ctx)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	if err := s.connectNATS(); err != nil {
		return err
	}
	defer s.closeNATS()
	if err := s.checkServerVersion(); err != nil {
		return err
	}
	if err := s.ensureStreams(ctx); err != nil {
		return err
	}
	needsDB := s.roles[RoleConsumer] || s.roles[RoleRelay] || s.roles[RoleDelivery]
	// The admin API reads and writes Postgres whatever the roles.
	if needsDB || s.cfg.AdminTokenValue() != "" {
		if err := s.openPool(ctx); err != nil {
			return err
		}
		defer s.pool.Close()
	}
	guard := s.newStoreGuard()
	l, err := s.listen(s.readinessChecks(needsDB, guard), guard)
	if err != nil {
		return err
	}
	return s.runRoles(ctx, l, guard, needsDB, ready)
}

// openPool opens the Postgres pool, sized by [Server.poolSize] unless the
// URL sets pool_max_conns.
func (s *Server) openPool(ctx context.Context) error {
	pcfg, err := pgxpool.ParseConfig(s.cfg.PoolURL())
	if err != nil {
		return fmt.Errorf("postgres config: %w", err)
	}
	if !strings.Contains(s.cfg.PoolURL(), "pool_max_conns") {
		pcfg.MaxConns = s.poolSize()
	}
	s.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("postgres config: %w", err)
	}
	return nil
}

// newStoreGuard is the storage guard of HOOKS and EVENTS; its refused is
// set by listen when this instance runs the ingress.
func (s *Server) newStoreGuard() *storeGuard {
	guard := &storeGuard{js: s.js, log: s.log, m: s.tel.metrics, consumers: s.consumerNames(), keyless: s.keylessConsumers(), interval: s.guardInterval,
		maxAge: s.streamOptions().HooksMaxAge(), maxBytes: s.hooksBound, removeSelftest: !s.cfg.Selftest.Enabled}
	if guard.interval <= 0 {
		guard.interval = defaultGuardInterval
	}
	// EVENTS is trimmed by the instances with a database, which the
	// pending deliveries' floor is read from; the others leave it as it is.
	if eps := s.cfg.Delivery.Endpoints; len(eps) > 0 && s.pool != nil {
		e := &eventsGuard{maxBytes: s.eventsBound,
			pending: func(ctx context.Context) (uint64, bool, error) { return delivery.EventsFloor(ctx, s.pool) }}
		for _, c := range eps {
			e.durables = append(e.durables, delivery.ConsumerName(c.Name))
		}
		guard.events = e
	}
	return guard
}

// readinessChecks are what /readyz and the admin status ask, in the order
// they report them.
func (s *Server) readinessChecks(needsDB bool, guard *storeGuard) []check {
	// A role that failed for good turns every readiness answer red at once,
	// for the moment until the process has stopped.
	checks := []check{{name: "roles", fn: func(context.Context) error { return s.roleFailure() }}, {name: "nats", fn: func(ctx context.Context) error {
		if !s.nc.IsConnected() {
			return errors.New("not connected")
		}
		_, err := s.js.AccountInfo(ctx)
		return err
	}}}
	if needsDB {
		checks = append(checks, check{name: "postgres", fn: s.pingPostgres, roles: []string{RoleConsumer, RoleRelay, RoleDelivery}})
	}
	checks = append(checks, s.consumerChecks()...)
	if s.roles[RoleIngress] {
		// Readiness turns red while HOOKS refuses new deliveries, so a load
		// balancer sends them to an instance that can store them.
		checks = append(checks, check{name: "hooks_room", fn: guard.hooksRoom, roles: []string{RoleIngress}})
	}
	if s.roles[RoleRelay] {
		checks = append(checks, check{name: "events_room", fn: guard.eventsRoom, roles: []string{RoleRelay}})
	}
	return checks
}

// listeners are what runRoles serves: the webhook listener, and the
// metrics and admin servers when they listen on their own addresses.
type listeners struct {
	http         net.Listener
	serveMetrics func(context.Context) error // nil: metrics are served on http
	serveAdmin   func(context.Context) error // nil: no admin API
}

// listen builds the webhook server's routes and opens the listeners; on
// an error it closes those it opened.
func (s *Server) listen(checks []check, guard *storeGuard) (listeners, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", readyz(checks, guard.strandedWarnings))
	if s.roles[RoleIngress] {
		h, err := s.ingress()
		if err != nil {
			return listeners{}, err
		}
		// A refused publish is the only sign of a full server store; it
		// makes the guard trim and readiness red.
		guard.refused = h.PublishHealth
		mux.Handle(bridge.Pattern, s.traceReceive(h))
	}
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return listeners{}, fmt.Errorf("listen %s: %w", s.cfg.HTTPAddr, err)
	}
	s.listener = ln
	serveMetrics, err := s.metricsEndpoint(mux)
	if err != nil {
		ln.Close()
		return listeners{}, err
	}
	serveAdmin, err := s.startAdmin(checks, s.console)
	if err != nil {
		ln.Close()
		if s.metricsListener != nil {
			s.metricsListener.Close()
		}
		return listeners{}, err
	}
	// Slow or endless requests are cut off instead of holding memory.
	s.httpSrv = bridge.NewHTTPServer(mux, bridge.DefaultLimits())
	return listeners{http: ln, serveMetrics: serveMetrics, serveAdmin: serveAdmin}, nil
}

// runRoles serves l and runs the roles until ctx ends or one fails.
func (s *Server) runRoles(ctx context.Context, l listeners, guard *storeGuard, needsDB bool, ready func(addr string)) error {
	// The first role to fail cancels the others: the process stops and
	// exits non-zero instead of running on without it (a consumer whose
	// durable the server refused would otherwise be noticed only at
	// shutdown).
	workers := pool.New().WithErrors().WithContext(ctx).WithCancelOnError().WithFirstError()
	s.goRole(workers, "http", func(context.Context) error {
		if err := s.httpSrv.Serve(l.http); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	workers.Go(func(ctx context.Context) error {
		<-ctx.Done()
		// Stop intake first: in-flight requests finish their publish.
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		return s.httpSrv.Shutdown(shutdownCtx)
	})
	if l.serveMetrics != nil {
		s.goRole(workers, "metrics", l.serveMetrics)
	}
	if l.serveAdmin != nil {
		s.goRole(workers, "admin", l.serveAdmin)
	}
	s.goRole(workers, "storage guard", guard.run)
	if needsDB {
		workers.Go(s.runDatabaseRoles) // its parts report their own failures
	}
	addr := l.http.Addr().String()
	s.log.Info("hookbridge started", "addr", addr, "roles", s.roleList(), "nats", s.natsDescription(),
		"hooks_max_bytes", s.hooksBound, "hooks_max_age", s.streamOptions().HooksMaxAge(), "events_max_bytes", s.eventsBound)
	if ready != nil {
		ready(addr)
	}
	err := workers.Wait()
	s.log.Info("hookbridge stopped")
	return err
}

// checkServerVersion refuses a NATS server too old for ordered
// consumption when a source has an ordering key: partition durables are
// built on priority groups with pinned clients (nats-server 2.11).
func (s *Server) checkServerVersion() error {
	keyed := s.cfg.KeyedSources()
	if len(keyed) == 0 || !(s.roles[RoleIngress] || s.roles[RoleConsumer]) {
		return nil
	}
	v := s.nc.ConnectedServerVersion()
	if stream.ServerAtLeast(v, stream.MinOrderedServer) {
		return nil
	}
	return fmt.Errorf("source %s has an ordering key: ordered consumption needs nats-server %s or later (priority groups), "+
		"but the server is %s; upgrade NATS, or set ordering_key: none on the source", keyed[0], stream.MinOrderedServer, v)
}

// errCodeNoSuitablePeers is nats-server's JSClusterNoPeersErrF ("no
// suitable peers for placement"); nats.go names no constant for it.
const errCodeNoSuitablePeers jetstream.ErrorCode = 10005

// ensureStreams creates or updates the streams, retrying while JetStream
// is not ready yet. A cluster still electing its meta leader does not
// answer API requests at all, so each attempt has a short deadline of its
// own (1 s for the first five, then 5 s; a create takes about 0.1 s on
// an R3 cluster that has its leaders): with the client's
// 5 s default, two instances starting together on a fresh cluster spent
// 5 s on every unanswered request and took about 22 s to become ready.
// Streams created by an attempt that timed out are found by the next one.
func (s *Server) ensureStreams(ctx context.Context) error {
	tries := 0
	attempt := func() (struct{}, error) {
		// Concurrent creates of one stream by two clients (two instances
		// starting together) are sometimes not answered either: the
		// stream exists, the next attempt finds it at once. So the first
		// attempts wait 1 s; later ones 5 s, for a slow cluster.
		tries++
		timeout := time.Second
		if tries > 5 {
			timeout = 5 * time.Second
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		s.storeMax = s.readStoreMax(actx)
		if err := s.adoptPartitions(actx); err != nil {
			return struct{}{}, err
		}
		// The three at once: an unanswered create then costs one timeout,
		// not one per stream.
		o := s.streamOptions()
		p := pool.New().WithErrors()
		p.Go(func() error {
			_, bound, err := stream.EnsureHooks(actx, s.js, o)
			s.hooksBound = bound
			return err
		})
		p.Go(func() error {
			_, err := stream.Ensure(actx, s.js, stream.ConflictsConfig(o))
			return err
		})
		p.Go(func() error {
			_, bound, err := stream.EnsureEvents(actx, s.js, o)
			s.eventsBound = bound
			return err
		})
		err := p.Wait()
		var apiErr *jetstream.APIError
		// "No suitable peers for placement" is a 400 too, but on a cluster
		// that is still forming (not every node has joined the meta group
		// yet) it clears by itself, so it is retried like a time-out.
		if errors.Is(err, stream.ErrPartitionsChanged) {
			return struct{}{}, backoff.Permanent(err)
		}
		if errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest && apiErr.ErrorCode != errCodeNoSuitablePeers {
			return struct{}{}, backoff.Permanent(err) // a configuration the server refuses
		}
		return struct{}{}, err
	}
	_, err := backoff.Retry(ctx, attempt,
		backoff.WithBackOff(&backoff.ExponentialBackOff{
			InitialInterval: 100 * time.Millisecond, Multiplier: 2, MaxInterval: 2 * time.Second, RandomizationFactor: 0.2,
		}),
		backoff.WithMaxElapsedTime(90*time.Second),
		backoff.WithNotify(func(err error, d time.Duration) {
			s.log.Warn("jetstream not ready; retrying", "err", err, "retry_in", d.Round(time.Millisecond))
		}))
	if err != nil {
		return fmt.Errorf("create streams: %w", err)
	}
	return nil
}

// runDatabaseRoles waits for Postgres (the ingress keeps accepting in the
// meantime), migrates, then runs the consumers and the relay.
func (s *Server) runDatabaseRoles(ctx context.Context) error {
	if err := s.waitAndMigrate(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// A statement of an SQL consumer that does not prepare refuses the
	// start, naming the consumer, the event type and Postgres's message.
	if s.roles[RoleConsumer] {
		if err := CheckSQLConsumers(ctx, s.pool, s.cfg, s.handlers); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return s.fail("sql consumers", err)
		}
	}
	// The endpoints' durables exist before the relay publishes and before
	// the instance reports ready (newDelivery).
	dm, err := s.newDelivery(ctx)
	if err != nil {
		return s.fail("delivery", err)
	}
	s.markMigrated()
	group := pool.New().WithErrors().WithContext(ctx).WithCancelOnError().WithFirstError()
	if s.roles[RoleConsumer] {
		consumers, err := s.consumers()
		if err != nil {
			return s.fail("consumers", err)
		}
		for _, c := range consumers {
			s.goRole(group, "consumer "+c.Name(), c.Run)
		}
		rec := engine.NewConflictRecorder(s.pool, s.js, s.log)
		s.goRole(group, "conflict recorder", rec.Run)
		if retention := s.cfg.InboxRetentionOrDefault(); retention > 0 {
			s.goRole(group, "inbox retention", func(ctx context.Context) error {
				return engine.RunInboxRetention(ctx, s.pool, s.js, retention, time.Hour, s.log)
			})
		}
	}
	if s.roles[RoleRelay] {
		s.goRole(group, "relay", s.newRelay().Run)
	}
	if s.roles[RoleDelivery] && dm != nil {
		// The endpoints are spread over the instances running the role,
		// one reader each. EVENTS exists by then: Run ensures every
		// stream before any role starts (a second update of EVENTS here
		// would only race the senders' consumer creates).
		s.goRole(group, "delivery", dm.Run)
	}
	return group.Wait()
}

// newRelay is the outbox relay, with the options of the relay section.
func (s *Server) newRelay() *relay.Relay {
	o := s.cfg.Relay.options()
	if o.DeleteSent && s.cfg.Selftest.Enabled {
		s.log.Warn("relay.retention is 0: published outbox messages are deleted, and hookbridge selftest, which counts them, will fail")
	}
	o.Stream, o.Logger, o.Tracer = s.streamOptions(), s.log, s.tracer()
	return relay.NewRelay(s.pool, s.js, o)
}

// goRole runs one part of the server in p. Parts retry what retrying can
// fix themselves; an error they return is final, so it is logged at once
// (not only when Run returns), readiness turns red and p cancels the
// other parts.
func (s *Server) goRole(p *pool.ContextPool, name string, fn func(ctx context.Context) error) {
	p.Go(func(ctx context.Context) error {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		return s.fail(name, err)
	})
}

// fail records that a part failed for good and logs it; the first
// failure is what readiness reports.
func (s *Server) fail(name string, err error) error {
	s.failure.CompareAndSwap(nil, &err)
	s.log.Error("stopping: a part of hookbridge failed", "part", name, "err", err)
	return err
}

// roleFailure is the first final failure of a part, nil while none failed.
func (s *Server) roleFailure() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Server) waitAndMigrate(ctx context.Context) error {
	delay := 500 * time.Millisecond
	for {
		_, err := schema.Migrate(ctx, s.pool, s.migrationSets()...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if missing := missingDatabase(err, s.pool); missing != nil {
			// Said at once and at error level: waiting will not create it.
			cc := s.pool.Config().ConnConfig
			s.log.Error("postgres database does not exist; consumers wait, ingress keeps accepting",
				"database", cc.Database, "host", cc.Host, "port", cc.Port, "fix", "create it, or point database_url at one that does", "retry_in", delay)
		} else {
			s.log.Warn("postgres not ready; consumers wait, ingress keeps accepting", "err", err, "retry_in", delay)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 30*time.Second)
	}
}

func (s *Server) migrationSets() []schema.Set {
	return MigrationSets(s.cfg, s.handlers)
}

// MigrationSets are the schema sets serve applies at start: hookbridge's
// own, then those of the handlers the configured consumers use (the
// self-test's too when it is enabled).
func MigrationSets(cfg Config, handlers Handlers) []schema.Set {
	handlers = WithSelftest(cfg, handlers)
	sets := []schema.Set{schema.Core()}
	seen := map[string]bool{}
	for _, cc := range cfg.Consumers {
		for _, set := range handlers[cc.Handler].Migrations {
			if !seen[set.Name] {
				seen[set.Name] = true
				sets = append(sets, set)
			}
		}
	}
	// SQL consumers' sets come last: their statements may use the tables
	// of the handlers' sets, never the reverse.
	for i := range cfg.Consumers {
		if set, ok := cfg.migrationSet(&cfg.Consumers[i]); ok {
			sets = append(sets, set)
		}
	}
	return sets
}

func (s *Server) ingress() (*bridge.Handler, error) {
	var sources []bridge.Source
	for i := range s.cfg.Sources {
		src, err := s.cfg.Sources[i].bridgeSource()
		if err != nil {
			return nil, err
		}
		sources = append(sources, src)
	}
	return bridge.New(s.js, bridge.Options{Sources: sources, MaxBodyBytes: s.cfg.MaxBodyBytes, MaxInFlight: s.cfg.MaxInFlight, Logger: s.log,
		Tracer: s.tracer(), Partitions: s.cfg.Streams.PartitionsOrDefault()})
}

// poolSize is the Postgres pool's size when the URL sets none
// (pool_max_conns): a connection for every batch the consumers may apply
// at once, plus a few for the relay, the conflict recorder, the failure
// counters and the health checks, and the delivery role's
// (deliveryPoolSize). pgxpool's own default (the number of
// CPUs, at least 4) would make the consumers' workers queue for
// connections behind each other and the relay on small machines.
func (s *Server) poolSize() int32 {
	n := 0
	if s.roles[RoleConsumer] {
		for i := range s.cfg.Consumers {
			cc := &s.cfg.Consumers[i]
			n += s.cfg.Concurrency(cc)
			if s.cfg.ConsumerPartitions(cc) > 0 {
				n += s.cfg.Concurrency(cc) // the partitions' batches apply besides the unkeyed ones
			}
		}
	}
	return int32(n + 4 + s.deliveryPoolSize())
}

// consumers are the configured consumers, each with the options
// [Config.consumerOptions] builds for it.
func (s *Server) consumers() ([]*engine.Consumer, error) {
	var out []*engine.Consumer
	for i := range s.cfg.Consumers {
		o, err := s.cfg.consumerOptions(&s.cfg.Consumers[i], s.handlers)
		if err != nil {
			return nil, err
		}
		o.Logger, o.Tracer = s.log, s.tracer()
		c, err := engine.New(s.pool, s.js, o)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// consumerNames are the configured consumers, whichever instance runs
// them (every instance shares the configuration): until each has its
// durable on HOOKS, the storage guard trims nothing.
func (s *Server) consumerNames() []string {
	var out []string
	for i := range s.cfg.Consumers {
		cc := &s.cfg.Consumers[i]
		out = append(out, cc.Name)
		// Keyed messages are acked only through the partition durables:
		// each one must exist before anything may be trimmed.
		for p := range s.cfg.ConsumerPartitions(cc) {
			out = append(out, stream.PartitionDurable(cc.Name, p))
		}
	}
	return out
}

// keylessConsumers are the configured consumers with no keyed source,
// with their sources (see storeGuard.keyless).
func (s *Server) keylessConsumers() map[string][]string {
	out := map[string][]string{}
	for i := range s.cfg.Consumers {
		if cc := &s.cfg.Consumers[i]; s.cfg.ConsumerPartitions(cc) == 0 {
			out[cc.Name] = cc.Sources
		}
	}
	return out
}

func (s *Server) closeNATS() {
	if s.nc != nil {
		_ = s.nc.Drain() // flushes pending acks
		for i := 0; i < 50 && !s.nc.IsClosed(); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		s.nc.Close()
	}
	if s.opsEndpoint != nil {
		removeOpsEndpoint(s.cfg.DataDir, *s.opsEndpoint)
	}
	if s.embedded != nil {
		s.embedded.Shutdown()
		s.embedded.WaitForShutdown()
	}
}

func (s *Server) roleList() []string {
	var out []string
	for r := range s.roles {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

func (s *Server) natsDescription() string {
	if s.embedded != nil {
		return "embedded (" + filepath.Join(s.cfg.DataDir, "jetstream") + ")"
	}
	return s.nc.ConnectedUrlRedacted()
}
