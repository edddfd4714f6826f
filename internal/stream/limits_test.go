package stream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// fillUntilRefused publishes 1 KiB messages on subject until the server
// refuses one (at most 10,000) and returns how many were stored and the
// refusal.
func fillUntilRefused(t *testing.T, js jetstream.JetStream, subject string) (int, error) {
	t.Helper()
	body := []byte(strings.Repeat("x", 1024))
	for i := range 10000 {
		_, err := js.Publish(context.Background(), subject, body, jetstream.WithMsgID(fmt.Sprint("id-", i)))
		if err != nil {
			return i, err
		}
	}
	t.Fatalf("%s: 10,000 messages stored, no limit reached", subject)
	return 0, nil
}

// TestFullStreamsRefuseNewMessages fills each stream hookbridge creates up
// to a byte limit and a message limit: the publish past the limit must
// fail (so the ingress answers 503 and the sender retries) and every
// message stored before must still be there, from sequence 1. With the
// old discard policy the publishes kept succeeding while the oldest,
// possibly unapplied, messages were deleted.
func TestFullStreamsRefuseNewMessages(t *testing.T) {
	t.Parallel()
	configs := map[string]func(stream.Options) jetstream.StreamConfig{
		stream.Hooks: stream.HooksConfig, stream.Events: stream.EventsConfig, stream.Conflicts: stream.ConflictsConfig,
	}
	subjects := map[string]string{stream.Hooks: "hooks.demo.order.created", stream.Events: "events.orders.created", stream.Conflicts: "conflicts.demo"}
	limits := map[string]struct {
		set  func(*jetstream.StreamConfig)
		want string
	}{
		"max_bytes": {func(c *jetstream.StreamConfig) { c.MaxBytes = 32 << 10 }, "maximum bytes exceeded"},
		// Not a configuration key today; checked so that adding one keeps
		// the same behaviour.
		"max_msgs": {func(c *jetstream.StreamConfig) { c.MaxMsgs = 20 }, "maximum messages exceeded"},
	}
	for name, cfgOf := range configs {
		for limit, l := range limits {
			t.Run(name+"/"+limit, func(t *testing.T) {
				t.Parallel()
				j := hookbridgetest.NATS(t)
				cfg := cfgOf(stream.Options{})
				l.set(&cfg)
				s, err := stream.Ensure(context.Background(), j.JS, cfg)
				if err != nil {
					t.Fatal(err)
				}
				stored, err := fillUntilRefused(t, j.JS, subjects[name])
				if err == nil || !strings.Contains(err.Error(), l.want) {
					t.Fatalf("publish past the limit: %v, want %q", err, l.want)
				}
				info, err := s.Info(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if info.State.FirstSeq != 1 || info.State.Msgs != uint64(stored) || stored == 0 {
					t.Fatalf("after %d stored: first seq %d, %d messages; want 1 and %d (nothing deleted to make room)",
						stored, info.State.FirstSeq, info.State.Msgs, stored)
				}
			})
		}
	}
}

// TestFullStoreRefusesNewMessages runs HOOKS on a server whose JetStream
// store is smaller than the stream would grow: the server refuses the
// publish ("insufficient resources") and keeps what it has.
func TestFullStoreRefusesNewMessages(t *testing.T) {
	t.Parallel()
	js := smallStoreServer(t, 256<<10)
	// No byte bound of the stream's own: the server's store is what fills.
	s, err := stream.Ensure(context.Background(), js, stream.HooksConfig(stream.Options{MaxBytes: -1}))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := fillUntilRefused(t, js, "hooks.demo.order.created")
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeInsufficientResources {
		t.Fatalf("publish into a full store: %v, want insufficient resources", err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != 1 || info.State.Msgs != uint64(stored) {
		t.Fatalf("first seq %d, %d messages; want 1 and %d", info.State.FirstSeq, info.State.Msgs, stored)
	}
}

// TestEnsureSwitchesExistingStreamsToDiscardNew updates a stream created
// with the old discard policy (as every existing deployment has it) and
// expects the update to be accepted, the policy changed and the messages
// kept: on the embedded server and, when HOOKBRIDGE_COMPAT_NATS_URL names
// one, on an older external server (2.9 on the CI machine).
func TestEnsureSwitchesExistingStreamsToDiscardNew(t *testing.T) {
	t.Parallel()
	servers := map[string]func(t *testing.T) jetstream.JetStream{
		"embedded": func(t *testing.T) jetstream.JetStream { return hookbridgetest.NATS(t).JS },
	}
	if url := os.Getenv("HOOKBRIDGE_COMPAT_NATS_URL"); url != "" {
		servers["external"] = func(t *testing.T) jetstream.JetStream {
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatalf("external NATS at %s: %v", url, err)
			}
			t.Cleanup(nc.Close)
			t.Logf("external NATS server %s", nc.ConnectedServerVersion())
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			return js
		}
	}
	for name, connect := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			js := connect(t)
			ctx := context.Background()
			for _, cfgOf := range []func(stream.Options) jetstream.StreamConfig{stream.HooksConfig, stream.EventsConfig, stream.ConflictsConfig} {
				// The external server is shared: a stream name and subject of
				// this test's own.
				cfg := cfgOf(stream.Options{MaxBytes: 1 << 20})
				tag := "hbtest_" + randomHex(t)
				cfg.Name, cfg.Subjects = strings.ToUpper(tag), []string{tag + ".>"}
				old := cfg
				old.Discard = jetstream.DiscardOld
				if _, err := js.CreateStream(ctx, old); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Name) })
				if _, err := js.Publish(ctx, tag+".x", []byte("kept")); err != nil {
					t.Fatal(err)
				}
				s, err := stream.Ensure(ctx, js, cfg)
				if err != nil {
					t.Fatalf("update %s to discard new: %v", cfgOf(stream.Options{}).Name, err)
				}
				info, err := s.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.Config.Discard != jetstream.DiscardNew || info.State.Msgs != 1 {
					t.Fatalf("%s after update: discard %v, %d messages; want new and 1", cfgOf(stream.Options{}).Name, info.Config.Discard, info.State.Msgs)
				}
			}
		})
	}
}

// smallStoreServer starts a server whose JetStream store holds maxStore
// bytes and returns a client of it.
func smallStoreServer(t *testing.T, maxStore int64) jetstream.JetStream {
	t.Helper()
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true, NoLog: true,
		JetStreamMaxStore: maxStore, JetStreamMaxMemory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestDefaultHooksBoundFitsTheServer: a byte limit is reserved in the
// server's store, and a server with less storage than the default bound
// refuses it. When the store's size is not known the default is halved
// until the server takes it; a bound the operator chose is not changed.
func TestDefaultHooksBoundFitsTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := smallStoreServer(t, 256<<20)
	if _, _, err := stream.EnsureHooks(ctx, js, stream.Options{MaxBytes: 1 << 30}); err == nil {
		t.Fatal("a chosen bound of 1 GiB on a 256 MiB store: accepted, want the server's refusal")
	}
	_, bound, err := stream.EnsureHooks(ctx, js, stream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := stream.FallbackHooksMaxBytes >> 6; bound != want { // 10 GiB halved six times: 160 MiB
		t.Fatalf("default bound on a 256 MiB store: %d, want %d", bound, want)
	}
	s, err := js.Stream(ctx, stream.Hooks)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxBytes; got != bound {
		t.Fatalf("HOOKS max bytes %d, want %d", got, bound)
	}
	// A store too small even for the smallest default: no bound of its
	// own, the store's refusals bound it.
	if _, bound, err := stream.EnsureHooks(ctx, smallStoreServer(t, 1<<20), stream.Options{}); err != nil || bound != -1 {
		t.Fatalf("default bound on a 1 MiB store: %d, %v; want -1 (none)", bound, err)
	}
}

// TestHooksUpgradeInPlaceKeepsMessages updates a HOOKS created with the
// old limits (a 3-day JetStream max age, no byte limit) to the new ones
// (no max age, a byte bound) on the embedded server and, when
// HOOKBRIDGE_COMPAT_NATS_URL names one, on an older external server. The
// update must be accepted and keep every message, also when the stream
// holds more than the new bound: nats-server 2.9 deletes the oldest
// messages to fit a lowered limit, so the limit is lowered only where the
// messages fit under it.
func TestHooksUpgradeInPlaceKeepsMessages(t *testing.T) {
	t.Parallel()
	for name, connect := range compatServers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			js := connect(t)
			ctx := context.Background()
			for _, c := range []struct {
				stored    int
				wantLimit int64
			}{
				{stored: 60, wantLimit: -1},       // 60 KiB do not fit 32 KiB: the old limit stays
				{stored: 10, wantLimit: 32 << 10}, // 10 KiB fit: lowered
			} {
				cfg := stream.HooksConfig(stream.Options{MaxBytes: 32 << 10})
				tag := "hbtest_" + randomHex(t)
				cfg.Name, cfg.Subjects = strings.ToUpper(tag), []string{tag + ".>"}
				old := cfg
				old.MaxAge, old.MaxBytes = stream.DefaultHooksMaxAge, -1
				if _, err := js.CreateStream(ctx, old); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Name) })
				body := []byte(strings.Repeat("x", 1024))
				for i := range c.stored {
					if _, err := js.Publish(ctx, tag+".x", body, jetstream.WithMsgID(fmt.Sprint("id-", i))); err != nil {
						t.Fatal(err)
					}
				}
				s, err := stream.EnsureKeepingMessages(ctx, js, cfg)
				if err != nil {
					t.Fatalf("update to the new limits: %v", err)
				}
				info, err := s.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.State.Msgs != uint64(c.stored) || info.State.FirstSeq != 1 {
					t.Fatalf("%d stored: after the update %d messages from seq %d; want all %d from 1",
						c.stored, info.State.Msgs, info.State.FirstSeq, c.stored)
				}
				if info.Config.MaxAge != 0 || info.Config.MaxBytes != c.wantLimit || info.Config.Discard != jetstream.DiscardNew {
					t.Fatalf("%d stored: max age %v, max bytes %d, discard %v; want none, %d, new",
						c.stored, info.Config.MaxAge, info.Config.MaxBytes, info.Config.Discard, c.wantLimit)
				}
			}
		})
	}
}

// compatServers are the servers an upgrade test runs on: the embedded
// one, and the external one HOOKBRIDGE_COMPAT_NATS_URL names (nats-server
// 2.9 on the CI machine), which is shared: tests there use streams of
// their own names.
func compatServers() map[string]func(t *testing.T) jetstream.JetStream {
	servers := map[string]func(t *testing.T) jetstream.JetStream{
		"embedded": func(t *testing.T) jetstream.JetStream { return hookbridgetest.NATS(t).JS },
	}
	if url := os.Getenv("HOOKBRIDGE_COMPAT_NATS_URL"); url != "" {
		servers["external"] = func(t *testing.T) jetstream.JetStream {
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatalf("external NATS at %s: %v", url, err)
			}
			t.Cleanup(nc.Close)
			t.Logf("external NATS server %s", nc.ConnectedServerVersion())
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			return js
		}
	}
	return servers
}

// errCodeInsufficientResources is nats-server's JSInsufficientResourcesErr.
const errCodeInsufficientResources = 10023

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// HOOKS_CONFLICTS has no JetStream max age (a conflict must not age out
// before the recorder wrote it to Postgres), and a stream created with
// one, as every deployment before had (streams.max_age, 3 days), loses it
// on the next start's update, keeping what it holds.
func TestEnsureRemovesTheConflictsMaxAge(t *testing.T) {
	t.Parallel()
	if got := stream.ConflictsConfig(stream.Options{MaxAge: time.Hour}).MaxAge; got != 0 {
		t.Fatalf("HOOKS_CONFLICTS max age %v, want none", got)
	}
	js := hookbridgetest.NATS(t).JS
	ctx := context.Background()
	old := stream.ConflictsConfig(stream.Options{})
	old.MaxAge = stream.DefaultHooksMaxAge
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, stream.ConflictSubject("demo"), []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := stream.EnsureIngress(ctx, js, stream.Options{MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, stream.Conflicts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 0 || info.State.Msgs != 1 {
		t.Fatalf("HOOKS_CONFLICTS after update: max age %v, %d messages; want none and 1", info.Config.MaxAge, info.State.Msgs)
	}
}
