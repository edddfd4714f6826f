package app

import (
	"context"
	"fmt"

	"github.com/sourcegraph/conc/pool"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/metrics"
)

// RoleDelivery posts EVENTS to the configured HTTP endpoints. It is part
// of "all" when endpoints are configured.
const RoleDelivery = "delivery"

// startDelivery starts the delivery of the configured endpoints in group
// (the endpoints are spread over the instances running the role, one
// reader each). EVENTS exists by then: Run ensures every stream before
// any role starts, whatever the roles (a second update of EVENTS here
// would only race the senders' consumer creates).
func (s *Server) startDelivery(ctx context.Context, group *pool.ContextPool) error {
	endpoints, err := s.cfg.Delivery.resolved(nil)
	if err != nil {
		return err
	}
	if len(endpoints) == 0 {
		return nil
	}
	dm, err := metrics.NewDelivery(s.tel.metrics)
	if err != nil {
		return fmt.Errorf("delivery metrics: %w", err)
	}
	names := make([]string, 0, len(endpoints))
	for _, e := range endpoints {
		dm.InitEndpoint(e.Name, delivery.StatusClasses)
		names = append(names, e.Name)
	}
	state := func(ctx context.Context) ([]metrics.EndpointState, []string, error) {
		return deliveryState(ctx, s, endpoints, names)
	}
	if err := s.tel.metrics.Register(metrics.NewDeliveryCollector(state, 0)); err != nil {
		return fmt.Errorf("delivery metrics: %w", err)
	}
	m, err := delivery.NewManager(delivery.Options{Endpoints: endpoints, JS: s.js, Pool: s.pool,
		Sign: verify.SignStandard, Logger: s.log, Tracer: s.deliveryTracer(dm)})
	if err != nil {
		return err
	}
	s.goRole(group, "delivery", m.Run)
	return nil
}

// deliveryState is what the delivery's scrape-time metrics report: each
// endpoint's state and backlog as every instance sees it, and the
// durables of endpoints no longer configured.
func deliveryState(ctx context.Context, s *Server, endpoints []delivery.Endpoint, names []string) ([]metrics.EndpointState, []string, error) {
	st, err := delivery.Status(ctx, s.pool, s.js, endpoints)
	if err != nil {
		return nil, nil, err
	}
	orphans, err := delivery.Orphans(ctx, s.js, names)
	if err != nil {
		return nil, nil, err
	}
	out := make([]metrics.EndpointState, 0, len(st))
	for _, e := range st {
		out = append(out, metrics.EndpointState{Name: e.Name, State: e.State, Pending: e.Pending, AckPending: e.AckPending,
			Tracked: e.Tracked, DeadLetters: e.DeadLetters})
	}
	return out, orphans, nil
}

// deliveryPoolSize is what the delivery role adds to the Postgres pool
// (delivery.PoolConnections).
func (s *Server) deliveryPoolSize() int {
	if !s.roles[RoleDelivery] {
		return 0
	}
	return delivery.PoolConnections(len(s.cfg.Delivery.Endpoints))
}
