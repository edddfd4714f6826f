package hookbridgetest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// EnsureHooks creates the ingress streams (HOOKS and its conflicts
// stream) with default options.
func (j *JetStream) EnsureHooks(t testing.TB) {
	t.Helper()
	if err := stream.EnsureIngress(context.Background(), j.JS, stream.Options{}); err != nil {
		t.Fatalf("ensure streams: %v", err)
	}
}

// PublishKeyedHook publishes body to HOOKS as the ingress publishes a
// delivery of a source with an ordering key: on key's partition among
// stream.DefaultPartitions (the default HOOKS records), with the key in
// its header. It returns the stream sequence.
func (j *JetStream) PublishKeyedHook(t testing.TB, source, eventID, eventType, key string, body []byte) uint64 {
	t.Helper()
	kh := stream.OrderingKeyHeader(key)
	msg := nats.NewMsg(stream.KeyedHookSubject(stream.Partition(kh, stream.DefaultPartitions), source, eventType))
	msg.Header.Set(stream.HeaderOrderingKey, kh)
	return j.publishHook(t, msg, source, eventID, eventType, body)
}

// PublishHook publishes body to HOOKS as the ingress would: subject, the
// hookbridge headers and the de-duplication id. It returns the stream
// sequence.
func (j *JetStream) PublishHook(t testing.TB, source, eventID, eventType string, body []byte) uint64 {
	t.Helper()
	return j.publishHook(t, nats.NewMsg(stream.HookSubject(source, eventType)), source, eventID, eventType, body)
}

func (j *JetStream) publishHook(t testing.TB, msg *nats.Msg, source, eventID, eventType string, body []byte) uint64 {
	t.Helper()
	msg.Data = body
	msg.Header.Set(stream.HeaderSource, source)
	msg.Header.Set(stream.HeaderEventID, eventID)
	msg.Header.Set(stream.HeaderEventType, eventType)
	msg.Header.Set(stream.HeaderReceivedAt, time.Now().UTC().Format(time.RFC3339Nano))
	ack, err := j.JS.PublishMsg(context.Background(), msg, jetstream.WithMsgID(stream.MsgID(source, eventID)))
	if err != nil {
		t.Fatalf("publish %s/%s: %v", source, eventID, err)
	}
	return ack.Sequence
}
