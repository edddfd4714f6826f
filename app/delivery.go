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

// startDelivery starts one sender per configured endpoint in group. It
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
	for _, e := range endpoints {
		sender, err := delivery.NewSender(ctx, delivery.Options{Endpoint: e, JS: s.js, Pool: s.pool,
			Sign: verify.SignStandard, Logger: s.log})
		if err != nil {
			return err
		}
		s.goRole(group, "delivery "+e.Name, sender.Run)
	}
	return nil
}
