package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A conflict the ingress stored while Postgres is unreachable stays in
// HOOKS_CONFLICTS past streams.max_age (here 2 s) until it is recorded:
// before, the stream's JetStream max age deleted it unrecorded, and the
// 409 answered its sender promised a record that never came. Once the
// recorder has written it, the storage guard trims it: the stream stays
// bounded.
func TestConflictsStayUntilRecorded(t *testing.T) {
	t.Parallel()
	const maxAge = 2 * time.Second
	dataDir := t.TempDir()
	config := func(dbURL string) Config {
		return testConfig(t, ordersHandlers(), func(c *Config) {
			c.DataDir, c.DatabaseURL = dataDir, dbURL
			// EVENTS keeps a JetStream max age, which must be at least the
			// duplicate window.
			c.Streams.MaxAge, c.Streams.DuplicateWindow = maxAge, maxAge
		})
	}
	first := startFastGuard(t, config(unreachableDB))

	// The repeat must come within the 2 s duplicate window to be a
	// conflict; on a slow machine it may not, then another id is tried.
	var id string
	for i := 0; id == "" && i < 10; i++ {
		try := fmt.Sprintf("evt-conflict-%d", i)
		if code := postOrderBody(t, first.addr, try, "o-1", 100); code != http.StatusAccepted {
			t.Fatalf("%s: status %d, want 202", try, code)
		}
		switch code := postOrderBody(t, first.addr, try, "o-1", 200); code {
		case http.StatusConflict:
			id = try
		case http.StatusAccepted: // past the window: stored again, try another id
		default:
			t.Fatalf("%s with another body: status %d, want 409", try, code)
		}
	}
	if id == "" {
		t.Fatal("no repeat came within the duplicate window")
	}
	ctx := context.Background()
	conflicts, err := first.js.Stream(ctx, stream.Conflicts)
	if err != nil {
		t.Fatal(err)
	}
	m, err := conflicts.GetLastMsgForSubject(ctx, stream.ConflictSubject("demo"))
	if err != nil {
		t.Fatalf("the conflict is not in %s: %v", stream.Conflicts, err)
	}
	// Watched until it is four max ages old (the guard looks every 50 ms):
	// it must be there at every look.
	for until := m.Time.Add(4 * maxAge); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		if _, err := conflicts.GetMsg(ctx, m.Sequence); err != nil {
			t.Fatalf("the unrecorded conflict left %s %s after it was stored: %v", stream.Conflicts, time.Since(m.Time).Round(time.Millisecond), err)
		}
	}
	if info := streamInfo(t, first.js, stream.Conflicts); info.Config.MaxAge != 0 {
		t.Fatalf("%s max age %v, want none", stream.Conflicts, info.Config.MaxAge)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	db := hookbridgetest.Postgres(t)
	second := startFastGuard(t, config(db.URL))
	db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.conflicts WHERE source = 'demo' AND event_id = $1", id)
	hookbridgetest.Eventually(t, time.Minute, "the recorded conflict trimmed", func() bool {
		return streamInfo(t, second.js, stream.Conflicts).State.Msgs == 0
	})
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.conflicts"); n != 1 {
		t.Fatalf("%d conflicts recorded, want 1", n)
	}
}

// postOrderBody sends a signed order.created for orderID with amount as
// event id and returns the status: two amounts are two bodies.
func postOrderBody(t *testing.T, addr, id, orderID string, amount int) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"type": orders.Created, "data": map[string]any{"order_id": orderID, "amount_cents": amount, "currency": "EUR"}})
	req, err := hookbridgetest.NewSignedRequest(context.Background(), "http://"+addr+"/webhooks/demo",
		hookbridgetest.Delivery{Secret: testSecret, ID: id, Time: time.Now(), Body: body})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
