package embedded_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hookbridge/hookbridge/internal/embedded"
)

// The fsync setting reaches the server: every write, an interval, or
// nats-server's own default (2 minutes) when none is given. varz shows
// what the server runs with.
func TestSyncSettingReachesTheServer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		o          embedded.Options
		wantAlways bool
		wantEvery  time.Duration
	}{
		{"always", embedded.Options{SyncAlways: true}, true, 2 * time.Minute},
		{"100ms", embedded.Options{SyncInterval: 100 * time.Millisecond}, false, 100 * time.Millisecond},
		{"unset", embedded.Options{}, false, 2 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.o.StoreDir = t.TempDir()
			ns, err := embedded.Start(c.o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
			v, err := ns.Varz(&server.VarzOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := v.JetStream.Config
			if got == nil || got.SyncAlways != c.wantAlways || got.SyncInterval != c.wantEvery {
				t.Fatalf("varz jetstream config %+v; want sync_always %v, sync_interval %v", got, c.wantAlways, c.wantEvery)
			}
		})
	}
	if _, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), SyncInterval: -time.Second}); err == nil {
		t.Fatal("a negative sync interval was accepted")
	}
}
