package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// publishKeyOff publishes an unkeyed event as the ingress does for a
// source without an ordering key: marked stream.UnkeyedKeyOff.
func publishKeyOff(t *testing.T, ns *hookbridgetest.JetStream, source, id, typ string, body []byte) {
	t.Helper()
	msg := nats.NewMsg(stream.HookSubject(source, typ))
	msg.Data = body
	msg.Header.Set(stream.HeaderSource, source)
	msg.Header.Set(stream.HeaderEventID, id)
	msg.Header.Set(stream.HeaderEventType, typ)
	msg.Header.Set(stream.HeaderReceivedAt, time.Now().UTC().Format(time.RFC3339Nano))
	msg.Header.Set(stream.HeaderUnkeyed, stream.UnkeyedKeyOff)
	if _, err := ns.JS.PublishMsg(context.Background(), msg, jetstream.WithMsgID(stream.MsgID(source, id))); err != nil {
		t.Fatalf("publish %s/%s: %v", source, id, err)
	}
}

// A source's key was on (v1 keyed), turned off (v2 unkeyed, marked as
// published without a key), and turned on again (v3 keyed). v2 is from
// before the key, like the unkeyed events of TestKeyTurnedOnWhileTheConsumerWasStopped,
// though a keyed message of its source comes before it: the partitions
// wait for it, so each key's v3 applies after its v2 even while k0's v2
// fails for a while.
func TestKeyOnOffOnPartitionsWaitForTheOffPeriodsMessages(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, sourceKeySchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	const keys = 3
	publish := func(keyed bool, v int) {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			body, _ := json.Marshal(versionBody{Key: key, V: v})
			id := fmt.Sprintf("%s-v%d", key, v)
			if keyed {
				ns.PublishKeyedHook(t, "demo", id, "version.set", key, body)
			} else {
				publishKeyOff(t, ns, "demo", id, "version.set", body)
			}
		}
	}
	// (v1 against v2 is given up by design: turning a key off gives up
	// order from then on. v2 against v3 is the key turned on.)
	publish(true, 1)  // key on
	publish(false, 2) // key off
	publish(true, 3)  // key on again
	var failing atomic.Bool
	failing.Store(true)
	runFor(t, db, ns, func(o *engine.Options) {
		o.Partitions, o.MaxDeliver = stream.DefaultPartitions, 1000
		o.Handler = consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if ev.ID == "k0-v2" && failing.Load() {
				return errors.New("failing for a while")
			}
			return sourceKeyHandler{}.Handle(ctx, tx, ev)
		})
	})
	// k0's v2 fails 20 times (the backoff is 50 ms) before it may apply:
	// long enough for the partitions to have applied k0's v3 past it, were
	// they not waiting for it.
	hookbridgetest.Eventually(t, time.Minute, "k0's unkeyed v2 failing", func() bool {
		return db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = 'k0' AND v = 3`) > 0 ||
			db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'k0-v2' AND failures >= 20`) == 1
	})
	failing.Store(false)
	hookbridgetest.Eventually(t, time.Minute, "every event applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == keys*3
	})
	if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied a JOIN srckeytest.applied b
		ON a.key = b.key AND a.id < b.id AND a.v = 3 AND b.v = 2`); n != 0 {
		t.Fatalf("%d pairs of a key's versions applied out of order (k0-v3 applied while k0-v2, from before the key was turned on again, failed)", n)
	}
}
