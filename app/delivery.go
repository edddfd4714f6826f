package app

import (
	"context"
	"fmt"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/metrics"
)

// RoleDelivery posts EVENTS to the configured HTTP endpoints. It is part
// of "all" when endpoints are configured.
const RoleDelivery = "delivery"

// newDelivery is the manager of the configured endpoints' delivery, nil
// when there are none or this instance runs neither the relay nor the
// delivery role. Its endpoints' durables exist when it returns (serve
// calls it before the relay starts and before it reports ready): a
// durable starts with the events published after it, so an event the
// relay published first would never reach a new endpoint. Only the
// delivery role runs it (startDelivery).
func (s *Server) newDelivery(ctx context.Context) (*delivery.Manager, error) {
	if !s.roles[RoleRelay] && !s.roles[RoleDelivery] {
		return nil, nil
	}
	endpoints, err := s.cfg.Delivery.resolved(nil)
	if err != nil || len(endpoints) == 0 {
		return nil, err
	}
	var tracer delivery.Tracer
	if s.roles[RoleDelivery] {
		if tracer, err = s.registerDeliveryMetrics(endpoints); err != nil {
			return nil, err
		}
	}
	m, err := delivery.NewManager(delivery.Options{Endpoints: endpoints, JS: s.js, Pool: s.pool,
		Sign: verify.SignStandard, Logger: s.log, Tracer: tracer})
	if err != nil {
		return nil, err
	}
	m.CreateDurables(ctx)
	return m, nil
}

// registerDeliveryMetrics registers the delivery role's metrics and returns the
// tracer that feeds them.
func (s *Server) registerDeliveryMetrics(endpoints []delivery.Endpoint) (delivery.Tracer, error) {
	dm, err := metrics.NewDelivery(s.tel.metrics)
	if err != nil {
		return nil, fmt.Errorf("delivery metrics: %w", err)
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
		return nil, fmt.Errorf("delivery metrics: %w", err)
	}
	return s.deliveryTracer(dm), nil
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
