package app

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/tracing"
)

// telemetry is a server's metrics, tracer and consumer readiness.
type telemetry struct {
	metrics *metrics.Registry
	tp      *tracing.Provider
	// external: tp was given with SetTracerProvider and is not shut down
	// by the server.
	external bool
	tracer   trace.Tracer
	// migrated is set once the database roles have migrated (readiness).
	migrated atomic.Bool
}

// SetTracerProvider makes the server record spans with tp instead of the
// configured exporter (programs embedding hookbridge, tests). Call it
// before Run; tp is not shut down by the server.
func (s *Server) SetTracerProvider(tp trace.TracerProvider) {
	s.tel.tp = &tracing.Provider{TracerProvider: tp, Enabled: true}
	s.tel.external = true
}

// startTelemetry creates the metrics registry and the tracer provider; the
// returned stop flushes buffered spans.
func (s *Server) startTelemetry(ctx context.Context) (stop func(), err error) {
	s.tel.metrics = metrics.New()
	for _, cc := range s.cfg.Consumers {
		if s.roles[RoleConsumer] {
			s.tel.metrics.InitConsumer(cc.Name, outcomeNames())
		}
	}
	if s.tel.tp == nil {
		s.tel.tp, err = tracing.Setup(ctx, tracing.Config{
			OTLPEndpoint: s.cfg.Tracing.OTLPEndpoint,
			ServiceName:  s.cfg.Tracing.ServiceName,
			SampleRatio:  s.cfg.Tracing.SampleRatio,
		})
		if err != nil {
			return nil, err
		}
		if s.tel.tp.Enabled {
			s.log.Info("tracing enabled", "otlp_endpoint", s.tel.tp.Endpoint)
		}
	}
	s.tel.tracer = tracing.Tracer(s.tel.tp)
	return func() {
		if s.tel.external {
			return
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.tel.tp.Shutdown(sctx); err != nil {
			s.log.Warn("tracing: flush on shutdown failed", "err", err)
		}
	}, nil
}

// tracingOn reports whether spans are recorded anywhere.
func (s *Server) tracingOn() bool { return s.tel.tp != nil && s.tel.tp.Enabled }

// traceReceive wraps the ingress handler in the receive span.
func (s *Server) traceReceive(h http.Handler) http.Handler {
	if !s.tracingOn() {
		return h
	}
	return receiveHandler(s.tel.tp, h)
}
