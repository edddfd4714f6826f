package engine_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A member that stops gracefully: how long until the other applies an
// event of every partition published right after?
func TestKeyedGracefulLeaveHandsOver(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orderSchema)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	attempts := &sync.Map{}
	a := startMember(t, db, ns, "a", attempts, 16)
	startMember(t, db, ns, "b", attempts, 16)
	awaitMembersSplit(t, ns, "versions", 2) // both have their share
	keys := map[int]string{}
	for i := 0; len(keys) < stream.DefaultPartitions; i++ {
		k := fmt.Sprintf("key%d", i)
		p := stream.Partition(stream.OrderingKeyHeader(k), stream.DefaultPartitions)
		if keys[p] == "" {
			keys[p] = k
		}
	}
	a.stop()
	start := time.Now()
	for _, k := range keys {
		body, _ := json.Marshal(versionBody{Key: k, V: 1})
		ns.PublishKeyedHook(t, "demo", k+"-v1", "version.set", k, body)
	}
	hookbridgetest.Eventually(t, time.Minute, "an event of every partition applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM hookbridge.inbox`) == len(keys)
	})
	t.Logf("after a graceful leave, every partition applied again after %v", time.Since(start).Round(100*time.Millisecond))
}
