package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/store"
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
		if st.OldestUnacked, err = durables.OldestUnacked(ctx, s.js, []*jetstream.ConsumerInfo{info}); err != nil {
			return metrics.ConsumerState{}, err
		}
	}
	return st, nil
}

// databaseState reads the outbox counts and the unresolved dead letters.
func (s *Server) databaseState(ctx context.Context) (metrics.DatabaseState, error) {
	st, err := relay.OutboxStats(ctx, s.pool)
	if err != nil {
		return metrics.DatabaseState{}, err
	}
	out := metrics.DatabaseState{OutboxPending: st.Pending, OutboxDead: st.Dead, OutboxSent: st.Sent,
		OldestPending: st.OldestPending}
	if out.DeadLetters, err = store.DeadLetterCountUnresolvedByConsumer(ctx, s.pool); err != nil {
		return metrics.DatabaseState{}, fmt.Errorf("count dead letters: %w", err)
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
