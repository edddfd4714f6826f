package app

import (
	"context"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/metrics"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// hookbridge is observed through one model: the tracer interfaces of
// bridge, consumer and publisher, shaped like pgx's (TraceXStart returns
// the context the step goes on with, TraceXEnd gets it back). There are
// two implementations, each of all three interfaces:
//
//	metricsTracer  Prometheus counters and histograms (below)
//	otelTracer     OpenTelemetry spans (observe_otel.go)
//
// tracers fans out to both when tracing is on, so the hot path pays for
// one interface call per step when it is off.

// fullTracer is a tracer of the ingress, the consumers and the relay.
type fullTracer interface {
	bridge.Tracer
	engine.Tracer
	relay.Tracer
}

var (
	_ fullTracer = metricsTracer{}
	_ fullTracer = (*otelTracer)(nil)
	_ fullTracer = tracers{}
)

// tracer is what the server's roles are observed with.
func (s *Server) tracer() fullTracer {
	m := metricsTracer{s.tel.metrics}
	if !s.tracingOn() {
		return m
	}
	return tracers{m, &otelTracer{tracer: s.tel.tracer}}
}

// tracers calls each tracer in turn; each Start gets the context the one
// before returned, and each End the context the last Start returned.
type tracers []fullTracer

func (ts tracers) TraceReceiveStart(ctx context.Context, d bridge.TraceReceiveStartData) context.Context {
	for _, t := range ts {
		ctx = t.TraceReceiveStart(ctx, d)
	}
	return ctx
}

func (ts tracers) TraceReceiveEnd(ctx context.Context, d bridge.TraceReceiveEndData) {
	for _, t := range ts {
		t.TraceReceiveEnd(ctx, d)
	}
}

func (ts tracers) TracePublishStart(ctx context.Context, d bridge.TracePublishStartData) context.Context {
	for _, t := range ts {
		ctx = t.TracePublishStart(ctx, d)
	}
	return ctx
}

func (ts tracers) TracePublishEnd(ctx context.Context, d bridge.TracePublishEndData) {
	for _, t := range ts {
		t.TracePublishEnd(ctx, d)
	}
}

func (ts tracers) TraceApplyStart(ctx context.Context, d engine.TraceApplyStartData) context.Context {
	for _, t := range ts {
		ctx = t.TraceApplyStart(ctx, d)
	}
	return ctx
}

func (ts tracers) TraceApplyEnd(ctx context.Context, d engine.TraceApplyEndData) {
	for _, t := range ts {
		t.TraceApplyEnd(ctx, d)
	}
}

func (ts tracers) TraceDeadLetterStart(ctx context.Context, d engine.TraceDeadLetterStartData) context.Context {
	for _, t := range ts {
		ctx = t.TraceDeadLetterStart(ctx, d)
	}
	return ctx
}

func (ts tracers) TraceDeadLetterEnd(ctx context.Context, d engine.TraceDeadLetterEndData) {
	for _, t := range ts {
		t.TraceDeadLetterEnd(ctx, d)
	}
}

func (ts tracers) TraceRelayStart(ctx context.Context, d relay.TraceRelayStartData) context.Context {
	for _, t := range ts {
		ctx = t.TraceRelayStart(ctx, d)
	}
	return ctx
}

func (ts tracers) TraceRelayEnd(ctx context.Context, d relay.TraceRelayEndData) {
	for _, t := range ts {
		t.TraceRelayEnd(ctx, d)
	}
}

func (ts tracers) TraceRelayPublishStart(ctx context.Context, d relay.TraceRelayPublishStartData) context.Context {
	for _, t := range ts {
		ctx = t.TraceRelayPublishStart(ctx, d)
	}
	return ctx
}

func (ts tracers) TraceRelayPublishEnd(ctx context.Context, d relay.TraceRelayPublishEndData) {
	for _, t := range ts {
		t.TraceRelayPublishEnd(ctx, d)
	}
}

// metricsTracer records the Prometheus metrics of internal/metrics.
type metricsTracer struct{ m *metrics.Registry }

func (t metricsTracer) TraceReceiveStart(ctx context.Context, _ bridge.TraceReceiveStartData) context.Context {
	return ctx
}

func (t metricsTracer) TraceReceiveEnd(_ context.Context, d bridge.TraceReceiveEndData) {
	source := d.Source
	if !d.Known {
		source = metrics.UnknownSource
	}
	t.m.IngressRequest(source, d.Status, d.VerifyReason())
	if d.Unkeyed && d.Status < 300 {
		t.m.IngressUnkeyed(source, d.UnkeyedReason)
	}
}

func (t metricsTracer) TracePublishStart(ctx context.Context, _ bridge.TracePublishStartData) context.Context {
	return ctx
}

func (t metricsTracer) TracePublishEnd(_ context.Context, d bridge.TracePublishEndData) {
	if d.Stream == stream.Hooks {
		t.m.IngressPublish(string(d.Result), d.Duration)
	}
}

func (t metricsTracer) TraceApplyStart(ctx context.Context, _ engine.TraceApplyStartData) context.Context {
	return ctx
}

func (t metricsTracer) TraceApplyEnd(_ context.Context, d engine.TraceApplyEndData) {
	t.m.ConsumerBatch(d.Consumer, len(d.Outcomes), d.Duration)
	// One counter update per outcome, not per event: a label lookup per
	// event costs more than the rest of this at high rates.
	for o, k := range countOutcomes(d.Outcomes) {
		if k > 0 {
			t.m.ConsumerEvents(d.Consumer, consumer.Outcome(o).String(), k)
		}
	}
}

// countOutcomes counts a batch's outcomes by value: every outcome a
// running consumer reports (engine.MessageOutcomes), of which Postponed
// is the last.
func countOutcomes(outs []consumer.Outcome) (n [consumer.Postponed + 1]int) {
	for _, o := range outs {
		if o >= 0 && int(o) < len(n) {
			n[o]++
		}
	}
	return n
}

func (t metricsTracer) TraceDeadLetterStart(ctx context.Context, _ engine.TraceDeadLetterStartData) context.Context {
	return ctx
}

func (t metricsTracer) TraceDeadLetterEnd(_ context.Context, d engine.TraceDeadLetterEndData) {
	if d.Err == nil {
		t.m.ConsumerEvents(d.Consumer, consumer.DeadLettered.String(), 1)
	}
}

func (t metricsTracer) TraceRelayStart(ctx context.Context, _ relay.TraceRelayStartData) context.Context {
	return ctx
}

func (t metricsTracer) TraceRelayEnd(_ context.Context, d relay.TraceRelayEndData) {
	t.m.RelayBatch(d.Sent, d.Failed, d.Duration)
}

func (t metricsTracer) TraceRelayPublishStart(ctx context.Context, _ relay.TraceRelayPublishStartData) context.Context {
	return ctx
}

func (t metricsTracer) TraceRelayPublishEnd(context.Context, relay.TraceRelayPublishEndData) {}

// outcomeNames are the outcome label values of a consumer's metrics.
func outcomeNames() []string {
	var out []string
	for _, o := range engine.MessageOutcomes() {
		out = append(out, o.String())
	}
	return out
}
