package publisher

import (
	"context"
	"maps"

	"github.com/hookbridge/hookbridge/internal/stream"
)

type contextHeadersKey struct{}

// WithHeaders returns a context whose headers [Enqueue] adds to every
// message enqueued with it, unless the message sets the same name itself.
// hookbridge uses it to store the apply's trace context (traceparent) in
// the outbox rows a handler writes, so the relay publishes it with the
// event and one trace follows a webhook to the events it caused. Names
// [Message.Header] would refuse are dropped.
func WithHeaders(ctx context.Context, h map[string]string) context.Context {
	valid := maps.Clone(contextHeaders(ctx))
	if valid == nil {
		valid = make(map[string]string, len(h))
	}
	for k, v := range h {
		if stream.CheckHeader(k, v) == nil {
			valid[k] = v
		}
	}
	return context.WithValue(ctx, contextHeadersKey{}, valid)
}

func contextHeaders(ctx context.Context) map[string]string {
	h, _ := ctx.Value(contextHeadersKey{}).(map[string]string)
	return h
}

// addContextHeaders returns own plus ctx's headers, own winning; own is
// never modified.
func addContextHeaders(ctx context.Context, own map[string]string) map[string]string {
	extra := contextHeaders(ctx)
	if len(extra) == 0 {
		return own
	}
	out := maps.Clone(extra)
	maps.Copy(out, own)
	return out
}
