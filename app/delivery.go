package app

import (
	"context"
	"fmt"

	"github.com/sourcegraph/conc/pool"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// RoleDelivery posts EVENTS to the configured HTTP endpoints. It is part
// of "all" when endpoints are configured.
const RoleDelivery = "delivery"

// startDelivery starts the delivery of the configured endpoints in group
// (the endpoints are spread over the instances running the role). It
// ensures EVENTS itself, since a delivery-only instance runs no relay.
func (s *Server) startDelivery(ctx context.Context, group *pool.ContextPool) error {
	endpoints, err := s.cfg.Delivery.resolved(nil)
	if err != nil {
		return err
	}
	if len(endpoints) == 0 {
		return nil
	}
	if _, err := stream.Ensure(ctx, s.js, stream.EventsConfig(s.streamOptions())); err != nil {
		return fmt.Errorf("delivery: %w", err)
	}
	m, err := delivery.NewManager(delivery.Options{Endpoints: endpoints, JS: s.js, Pool: s.pool,
		Sign: verify.SignStandard, Logger: s.log})
	if err != nil {
		return err
	}
	s.goRole(group, "delivery", m.Run)
	return nil
}
