package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
)

// TestConsoleEndpointInBrowser: a delivery that failed shows on the
// overview's endpoints and on the endpoint's page as a dead letter;
// Requeue there delivers it once the receiver is fixed; Disable and
// Enable change the state the page shows; a replay by event id, dry run
// first, sends the event again. Each effect is counted at the receiver
// or in Postgres, and each state the page shows is waited for.
func TestConsoleEndpointInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	recv := &endpointReceiver{got: map[string]int{}}
	recv.code.Store(http.StatusInternalServerError)
	hs := httptest.NewServer(recv)
	t.Cleanup(hs.Close)
	s := startConsoleServeWith(t, builtin.Handlers(), func(c *app.Config) {
		c.Delivery.Endpoints = []app.EndpointConfig{{Name: "partner", URL: hs.URL + "/hooks", Subjects: []string{"events.orders.>"},
			Secrets: []string{demoSecret}, Retry: []time.Duration{0}, AllowPrivate: true}}
	})
	ctx := context.Background()
	// The durable exists once an instance holds the endpoint's lease: an
	// event published from then on reaches it.
	hookbridgetest.Eventually(t, time.Minute, "an instance reads partner", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM hookbridge.delivery_endpoints WHERE name = 'partner' AND owner IS NOT NULL") == 1
	})
	err := pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(ctx, tx, publisher.Message{ID: "ord-b-1", Subject: "events.orders.created", Payload: []byte(`{"order_id":"b-1"}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_dead_letters WHERE endpoint = 'partner' AND resolved_at IS NULL")
	dl := s.id(t, "SELECT id FROM hookbridge.delivery_dead_letters WHERE endpoint = 'partner'")

	b := newBrowser(t, chrome)
	b.login("http://" + s.adminAddr + "/")
	row := `#ov-endpoints tr[data-endpoint="partner"]`
	if got := b.textWhen(row+` td[data-label="Dead letters"]`, is("1")); got != "1" {
		t.Fatalf("the overview shows partner's dead letters as %q, want 1", got)
	}
	b.shot("overview-endpoints")
	b.do("open the endpoint", chromedp.Click(css(row+" a")))
	dlRow := fmt.Sprintf(`#ep-dead tr[data-dead-letter="%d"]`, dl)
	b.until("the dead letter on the endpoint's page", fmt.Sprintf(`document.querySelector(%q) !== null`, dlRow))
	if got := b.textWhen(`#ep-attempts`, has("500", "5xx", "ord-b-1")); !strings.Contains(got, "5xx") {
		t.Fatalf("the latest attempts show %q, want the 500", got)
	}
	b.shot("endpoint-dead-letter")

	// Fixed receiver: Requeue delivers it once, and the list empties.
	recv.code.Store(http.StatusNoContent)
	b.do("requeue it", chromedp.Click(css(dlRow+` button[data-action="requeue"]`)))
	hookbridgetest.Eventually(t, time.Minute, "the requeued delivery arrives", func() bool { return recv.count("ord-b-1") == 2 })
	b.until("no dead letter on the page", `document.querySelector("#ep-dead .empty") !== null && document.getElementById("ep-dead-count").textContent === "0"`)

	b.do("disable it", chromedp.Click(css(`#ep-toggle[data-action="disable"]`)))
	s.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_endpoints WHERE name = 'partner' AND state = 'disabled'")
	b.until("the page says disabled", `document.querySelector('#ep-state[data-state="disabled"]') !== null && document.querySelector('#ep-toggle[data-action="enable"]') !== null`)
	b.shot("endpoint-disabled")
	b.do("enable it", chromedp.Click(css(`#ep-toggle[data-action="enable"]`)))
	s.db.AwaitCount(t, 1, "SELECT count(*) FROM hookbridge.delivery_endpoints WHERE name = 'partner' AND state = 'enabled'")
	b.until("the page says enabled", `document.querySelector('#ep-state[data-state="enabled"]') !== null`)

	// Replay it by id: the dry run sends nothing, Apply sends it once.
	b.do("dry-run a replay", chromedp.SetValue(css("#ep-rp-id"), "ord-b-1"), chromedp.Click(css("#ep-rp-dry")))
	b.until("the dry run's count", `(document.getElementById("ep-rp-summary")||{}).textContent === "1 event(s) match; 0 already pending."`)
	if n := recv.count("ord-b-1"); n != 2 {
		t.Fatalf("after the dry run the receiver got ord-b-1 %d times, want 2", n)
	}
	b.do("apply the replay", chromedp.Click(css("#ep-rp-apply")))
	hookbridgetest.Eventually(t, time.Minute, "the replayed event arrives", func() bool { return recv.count("ord-b-1") == 3 })
	b.until("the replay's count", `(document.getElementById("ep-rp-summary")||{}).textContent.startsWith("1 event(s) queued")`)
	if ex := b.pageExceptions(); len(ex) > 0 {
		t.Errorf("the page threw: %v", ex)
	}
}
