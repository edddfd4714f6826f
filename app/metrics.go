package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// MetricsPath is where the Prometheus metrics are served: on the main
// HTTP address, or on metrics_addr when that is set.
const MetricsPath = "/metrics"

// metricsEndpoint registers the scrape-time collectors of the running
// roles and serves the metrics: on mux when no metrics_addr is set (run is
// nil then), else on a listener of its own that run serves until ctx ends.
func (s *Server) metricsEndpoint(mux *http.ServeMux) (run func(ctx context.Context) error, err error) {
	reg := s.tel.metrics
	if s.roles[RoleConsumer] && len(s.cfg.Consumers) > 0 {
		names := make([]string, 0, len(s.cfg.Consumers))
		for _, cc := range s.cfg.Consumers {
			names = append(names, cc.Name)
		}
		if err := reg.Register(metrics.NewConsumerCollector(names, s.consumerState, 0)); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if s.pool != nil {
		if err := reg.Register(metrics.NewDatabaseCollector(s.databaseState, 0)); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if s.cfg.MetricsAddr == "" {
		mux.Handle("GET "+MetricsPath, reg.Handler())
		return nil, nil
	}
	ln, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen metrics_addr %s: %w", s.cfg.MetricsAddr, err)
	}
	s.metricsListener = ln
	admin := http.NewServeMux()
	admin.Handle("GET "+MetricsPath, reg.Handler())
	admin.HandleFunc("GET /healthz", healthz)
	srv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	return func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return fmt.Errorf("metrics http: %w", err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics http: %w", err)
		}
		return nil
	}, nil
}

// MetricsAddr is the metrics listener's address when metrics_addr is set
// and Run has started listening ("" otherwise: /metrics is on [Server.Addr]).
func (s *Server) MetricsAddr() string {
	if s.metricsListener == nil {
		return ""
	}
	return s.metricsListener.Addr().String()
}

// consumerState reads a durable consumer's JetStream info (a keyed
// consumer's: with its partitions', keyedConsumerState).
func (s *Server) consumerState(ctx context.Context, name string) (metrics.ConsumerState, error) {
	if cc := s.cfg.Consumer(name); cc != nil && s.cfg.ConsumerPartitions(cc) > 0 {
		return s.keyedConsumerState(ctx, name)
	}
	// A consumer without a keyed source may still drain partition
	// durables (its key was turned off, or another instance keys it): its
	// figures are theirs too, as in status.
	if _, err := s.js.Consumer(ctx, stream.Hooks, stream.PartitionDurable(name, 0)); err == nil {
		return s.keyedConsumerState(ctx, name)
	}
	c, err := s.js.Consumer(ctx, stream.Hooks, name)
	if err != nil {
		return metrics.ConsumerState{}, err
	}
	info := c.CachedInfo() // js.Consumer has just fetched it
	st := metrics.ConsumerState{Pending: info.NumPending, AckPending: info.NumAckPending, Redelivered: info.NumRedelivered,
		Paused: info.Paused}
	if info.NumPending > 0 || info.NumAckPending > 0 {
		if st.OldestUnacked, err = oldestUnacked(ctx, s.js, []*jetstream.ConsumerInfo{info}); err != nil {
			return metrics.ConsumerState{}, err
		}
	}
	return st, nil
}

// oldestUnacked is the age of the oldest HOOKS message a consumer has not
// acked yet, 0 when there is none. The consumer is its durables (a keyed
// one's own and its partitions'): for each that holds work, the first
// message after its ack floor on its own filter subjects, the oldest of
// those. The stream's next message after a floor is not it: a partition
// durable's floor stays at the last message of its partition (0 for one
// that had none yet), and what follows in the stream belongs to the
// other partitions, already applied, so the stream's first message would
// be reported for a paused consumer whose only waiting event is seconds
// old.
func oldestUnacked(ctx context.Context, js jetstream.JetStream, durables []*jetstream.ConsumerInfo) (time.Duration, error) {
	hooks, err := js.Stream(ctx, stream.Hooks)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream.Hooks, err)
	}
	var oldest *jetstream.RawStreamMsg
	for _, ci := range durables {
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			continue
		}
		m, err := firstUnacked(ctx, hooks, ci)
		if err != nil {
			return 0, err
		}
		if m != nil && (oldest == nil || m.Sequence < oldest.Sequence) {
			oldest = m
		}
	}
	if oldest == nil {
		return 0, nil
	}
	return max(time.Since(oldest.Time), 0), nil
}

// firstUnacked is the first HOOKS message after the durable's ack floor
// that its filter subjects match (nil when there is none).
func firstUnacked(ctx context.Context, hooks jetstream.Stream, ci *jetstream.ConsumerInfo) (*jetstream.RawStreamMsg, error) {
	filters := ci.Config.FilterSubjects
	if ci.Config.FilterSubject != "" {
		filters = append([]string{ci.Config.FilterSubject}, filters...)
	}
	if len(filters) == 0 {
		filters = []string{">"}
	}
	var first *jetstream.RawStreamMsg
	for _, f := range filters {
		m, err := hooks.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(f))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("consumer %s: first message of %s after its ack floor %d: %w", ci.Name, f, ci.AckFloor.Stream, err)
		}
		if first == nil || m.Sequence < first.Sequence {
			first = m
		}
	}
	return first, nil
}

// databaseState reads the outbox counts and the unresolved dead letters.
func (s *Server) databaseState(ctx context.Context) (metrics.DatabaseState, error) {
	st, err := relay.OutboxStats(ctx, s.pool)
	if err != nil {
		return metrics.DatabaseState{}, err
	}
	out := metrics.DatabaseState{OutboxPending: st.Pending, OutboxDead: st.Dead, OutboxSent: st.Sent,
		OldestPending: st.OldestPending}
	if out.DeadLetters, err = unresolvedDeadLetters(ctx, s.pool); err != nil {
		return metrics.DatabaseState{}, err
	}
	if s.roles[RoleConsumer] {
		for _, cc := range s.cfg.Consumers {
			if _, ok := out.DeadLetters[cc.Name]; !ok {
				out.DeadLetters[cc.Name] = 0
			}
		}
	}
	return out, nil
}

// consumerChecks are the readiness checks of the consumer role: the
// database is migrated and every durable consumer exists in JetStream (a
// consumer that could not create its durable consumer is not ready).
func (s *Server) consumerChecks() []check {
	if !s.roles[RoleConsumer] || len(s.cfg.Consumers) == 0 {
		return nil
	}
	return []check{{name: "consumers", fn: func(ctx context.Context) error {
		if !s.tel.migrated.Load() {
			return errors.New("database not migrated yet")
		}
		for _, cc := range s.cfg.Consumers {
			if _, err := s.js.Consumer(ctx, stream.Hooks, cc.Name); err != nil {
				if errors.Is(err, jetstream.ErrConsumerNotFound) {
					return fmt.Errorf("durable consumer %s not created yet", cc.Name)
				}
				return fmt.Errorf("durable consumer %s: %w", cc.Name, err)
			}
		}
		return nil
	}, roles: []string{RoleConsumer}}}
}

// markMigrated records that the database roles have migrated.
func (s *Server) markMigrated() { s.tel.migrated.Store(true) }
