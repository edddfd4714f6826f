package publisher

import (
	"context"
	"encoding/json"
	"maps"
	"time"
)

// Observer is told what the relay publishes (metrics, tracing). It is
// called on the relay's goroutine once per batch, after the PubAcks were
// awaited and before the outcome is committed; it must be quick.
type Observer interface {
	ObservePublish(start time.Time, elapsed time.Duration, rows []PublishedRow)
}

// PublishedRow is one outbox row the relay tried to publish.
type PublishedRow struct {
	EventID string
	Subject string
	// Header holds the row's headers, as published (the trace context
	// among them).
	Header map[string]string
	// Err is nil when JetStream acknowledged the message.
	Err error
}

// publishObserved is publish, reported to the configured observer.
func (r *Relay) publishObserved(chains [][]*outRow) outcome {
	ob := r.opts.Observer
	if ob == nil {
		return r.publish(chains)
	}
	start := time.Now()
	out := r.publish(chains)
	elapsed := time.Since(start)
	rows := make([]PublishedRow, 0, len(out.sent)+len(out.fails))
	for _, o := range out.sent {
		rows = append(rows, publishedRow(o, nil))
	}
	for _, f := range out.fails {
		rows = append(rows, publishedRow(f.row, f.err))
	}
	ob.ObservePublish(start, elapsed, rows)
	return out
}

func publishedRow(o *outRow, err error) PublishedRow {
	var hdr map[string]string
	_ = json.Unmarshal(o.headers, &hdr) // a malformed column already fails the row itself
	return PublishedRow{EventID: o.eventID, Subject: o.subject, Header: hdr, Err: err}
}

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
		if checkHeader(k, v) == nil {
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
