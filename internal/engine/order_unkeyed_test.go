package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A keyed source's own unkeyed messages (a delivery that names no key,
// or whose key cannot be read) never had an entity to be ordered with:
// the partitions do not wait for them at start, even when one fails for
// ever and holds the unkeyed durable's ack floor, start after start.

// publishOwnUnkeyed publishes an unkeyed message of a keyed source as the
// ingress does, marked with why it has no key.
func publishOwnUnkeyed(t *testing.T, ns *hookbridgetest.JetStream, source, id, typ string, body []byte) {
	t.Helper()
	msg := nats.NewMsg(stream.HookSubject(source, typ))
	msg.Data = body
	msg.Header.Set(stream.HeaderSource, source)
	msg.Header.Set(stream.HeaderEventID, id)
	msg.Header.Set(stream.HeaderEventType, typ)
	msg.Header.Set(stream.HeaderReceivedAt, time.Now().UTC().Format(time.RFC3339Nano))
	msg.Header.Set(stream.HeaderUnkeyed, "absent")
	if _, err := ns.JS.PublishMsg(context.Background(), msg, jetstream.WithMsgID(stream.MsgID(source, id))); err != nil {
		t.Fatal(err)
	}
}

func TestPartitionsDoNotWaitForTheKeyedSourcesOwnUnkeyedMessages(t *testing.T) {
	t.Parallel()
	for _, marked := range []bool{false, true} {
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, sourceKeySchema)
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			exec(t, db, `INSERT INTO srckeytest.block VALUES ('demo', 'poison')`)
			poison, _ := json.Marshal(versionBody{Key: "poison", V: 1})
			if marked {
				// The source's very first message: only its mark tells it
				// from one published before the source had a key.
				publishOwnUnkeyed(t, ns, "demo", "balance-1", "version.set", poison)
				publishVersion(t, ns, "demo", "k-1", "k", 1, "")
			} else {
				// Stored by an ingress that did not mark it: a keyed
				// message of its source before it tells.
				publishVersion(t, ns, "demo", "k-1", "k", 1, "")
				ns.PublishHook(t, "demo", "balance-1", "version.set", poison)
			}
			run := func() (stop func()) {
				c, err := engine.New(db.Pool, ns.JS, engine.Options{
					Name: "srckey", EventTypes: []string{"version.set"}, Handler: sourceKeyHandler{},
					Partitions: stream.DefaultPartitions, MaxDeliver: 1000, // counted, never dead-lettered here
					Backoff: []time.Duration{50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				var once sync.Once
				stop = func() { once.Do(func() { cancel(); <-done }) }
				t.Cleanup(stop)
				return stop
			}
			stop := run()
			hookbridgetest.Eventually(t, time.Minute, "the own unkeyed message failing", func() bool {
				return db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'balance-1' AND failures > 0`) == 1
			})
			publishVersion(t, ns, "demo", "k-2", "k", 2, "")
			if n := db.AwaitCount(t, 2, `SELECT count(*) FROM srckeytest.applied WHERE key = 'k'`); n != 2 {
				t.Fatalf("%d of key k's 2 events applied while the own unkeyed message fails", n)
			}
			stop()
			// Started again, the failing message still holds the
			// unkeyed durable's floor below the keyed ones.
			publishVersion(t, ns, "demo", "k-3", "k", 3, "")
			run()
			if n := db.AwaitCount(t, 3, `SELECT count(*) FROM srckeytest.applied WHERE key = 'k'`); n != 3 {
				t.Fatalf("%d of key k's 3 events applied after a restart", n)
			}
			if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied WHERE key = 'poison'`); n != 0 {
				t.Fatalf("the blocked message applied %d times", n)
			}
			if n := db.Count(t, `SELECT count(*) FROM srckeytest.applied a JOIN srckeytest.applied b
				ON a.key = b.key AND a.id < b.id AND a.v > b.v`); n != 0 {
				t.Fatalf("%d pairs applied out of order", n)
			}
		})
	}
}
