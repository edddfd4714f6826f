package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// failingIDs is the orders handler, except that the events with the ids
// given fail permanently (dead-lettered on their first delivery) until
// fixed is set.
func failingIDs(fixed *atomic.Bool, ids ...string) app.Handlers {
	h := builtin.Handlers()
	spec := h["orders"]
	inner := spec.New
	spec.New = func(name string) consumer.Handler {
		next := inner(name)
		return consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			if !fixed.Load() && slices.Contains(ids, ev.ID) {
				return consumer.Permanent(fmt.Errorf("%s: the handler cannot apply it yet", ev.ID))
			}
			return next.Handle(ctx, tx, ev)
		})
	}
	h["orders"] = spec
	return h
}

// TestConsoleKeyedConsumerInBrowser: the demo source is keyed by its
// order id, so the orders consumer reads partitions. The overview shows
// them and the one member (this process) serving them, with its backlog
// while the consumer is paused; the detail stays open across refreshes
// and on a phone nothing scrolls sideways; a replay of a later event of
// a waiting one's key holds it, and says so. A dead letter that a later
// event of its order passed shows its key and that event; Requeue warns
// and asks once more, applying nothing until confirmed, then applies it
// out of order and says so.
func TestConsoleKeyedConsumerInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	var fixed atomic.Bool
	s := startConsoleServe(t, failingIDs(&fixed, "evt-k1"))
	b := newBrowser(t, chrome)
	base := "http://" + s.adminAddr + "/"
	b.login(base)
	host, _ := os.Hostname()
	parts := stream.DefaultPartitions

	// Partitions and members.
	detail := `#ov-keyed details[data-consumer="orders"]`
	// A partition is pinned to a member from its first delivery on, so an
	// idle one may have no pin.
	b.until("the keyed detail of orders", fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent.includes("%d partitions, ") && `+
		`document.querySelector(%q).textContent.endsWith("; 1 member")`, detail+" summary", parts, detail+" summary"))
	keyed := fmt.Sprintf("keyed: %d partitions", parts)
	if got := b.textWhen(`#ov-consumers tr[data-consumer="orders"] td[data-label="Consumer"]`, has(keyed)); !strings.Contains(got, keyed) {
		t.Errorf("the orders row shows %q, want it marked keyed with its partitions", got)
	}
	b.do("open the detail", chromedp.Click(css(detail+" summary")))
	member := detail + " tr[data-member]"
	b.until("the member row", fmt.Sprintf(`document.querySelectorAll(%q).length === 1`, member))
	// The member row shows up before the partitions are assigned to it
	// (seconds on a loaded machine): each figure is waited for.
	for label, want := range map[string]string{"Host": host, "PID": fmt.Sprint(os.Getpid()), "Partitions": fmt.Sprint(parts), "Backlog": "0"} {
		if got := b.textWhen(member+fmt.Sprintf(` td[data-label=%q]`, label), is(want)); got != want {
			t.Errorf("member %s shown as %q, want %q", label, got, want)
		}
	}
	b.shot("keyed-detail")
	if n := b.evalWhen(fmt.Sprintf(`document.querySelectorAll(%q).length === %d`, detail+" tr[data-partition]", parts)); !n {
		t.Errorf("the detail does not list %d partitions", parts)
	}

	// Per-member lag: paused, an event waits in its partition, counted in
	// the member's backlog; resumed, it applies.
	crow := `#ov-consumers tr[data-consumer="orders"]`
	b.do("pause orders", chromedp.Click(css(crow+" button")))
	b.until("orders paused", fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent.includes("paused")`, crow))
	if code := s.post(t, "evt-lag", "o-lag", 5); code != http.StatusAccepted {
		t.Fatalf("evt-lag: status %d", code)
	}
	lagPart := stream.Partition(stream.OrderingKeyHeader("o-lag"), parts)
	b.until("the member's backlog", fmt.Sprintf(`document.querySelector(%q).textContent === "1" && document.querySelector(%q).textContent === "1"`,
		member+` td[data-label="Backlog"]`, detail+fmt.Sprintf(` tr[data-partition="%d"] td[data-label="Pending"]`, lagPart)))
	// The consumer's oldest unacked message is the waiting event, seconds
	// old: shown in seconds, not "—".
	if got := b.textWhen(crow+` td[data-label="Oldest unacked"]`, func(s string) bool { return strings.HasSuffix(s, " s") }); !strings.HasSuffix(got, " s") {
		t.Errorf("the paused consumer's oldest unacked message shown as %q, want its waiting event's age in seconds", got)
	}
	b.do("open the partitions", chromedp.Click(css(detail+" details.partitions summary")))
	b.shot("keyed-backlog")
	b.until("a refresh of the overview", fmt.Sprintf(`document.getElementById("ov-updated").textContent !== %q`, b.text("#ov-updated")))
	if !b.eval(fmt.Sprintf(`document.querySelector(%q).open && document.querySelector(%q).open`, detail, detail+" details.partitions")) {
		t.Error("the detail closed itself on a refresh")
	}
	if n := s.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-lag'"); n != 0 {
		t.Fatal("a paused consumer applied an event")
	}
	// A replay of the payment of that order, while its order.created
	// waits: the payment is held, not applied, and the replay's end says
	// so.
	if code := s.postBody(t, "evt-lag-paid", orders.WebhookBody(orders.Paid, "o-lag", 5)); code != http.StatusAccepted {
		t.Fatalf("evt-lag-paid: status %d", code)
	}
	b.do("open replay", chromedp.Click(css(`#nav a[data-page="replay"]`)))
	b.until("the consumer list", `[...document.querySelectorAll("#rp-consumer option")].some(o => o.value === "orders")`)
	b.do("dry run of the payments", chromedp.SetValue(css("#rp-consumer"), "orders"), chromedp.SetValue(css("#rp-type"), orders.Paid),
		chromedp.Click(css("#rp-dry")))
	b.until("the dry run's summary", `document.getElementById("rp-count") !== null && !document.getElementById("rp-apply-box").hidden`)
	b.do("apply the replay", chromedp.Click(css("#rp-apply")))
	b.until("the replay to end", `["done", "failed"].includes(document.getElementById("rp-progress-text").dataset.state)`)
	b.shot("replay-held")
	want := "Done: 1 of 1 re-delivered. 1 of them held, not applied: an earlier event of their ordering key failed or is not applied yet; replay it once it is."
	if got := b.text("#rp-progress-text"); got != want {
		t.Errorf("replay progress %q, want %q", got, want)
	}
	if n := s.db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE event_id = 'evt-lag-paid'"); n != 0 {
		t.Fatal("the held payment was applied")
	}
	b.do("back to the overview", chromedp.Click(css(`#nav a[data-page="overview"]`)))
	b.until("orders still paused", fmt.Sprintf(`(document.querySelector(%q)||{textContent:""}).textContent.includes("paused")`, crow))
	// The replay's message goes a few seconds after it came, moving the
	// page up: a click aimed before that would land elsewhere.
	b.until("the replay's message gone", `document.getElementById("flash").childElementCount === 0`)

	b.do("resume orders", chromedp.Click(css(crow+" button")))
	b.until("orders resumed", `document.getElementById("flash").textContent.includes("Consumer orders resumed.")`)
	hookbridgetest.Eventually(t, time.Minute, "the events applied after resume", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM demo.orders WHERE order_id = 'o-lag' AND status = 'paid'") == 1
	})
	b.until("no backlog", fmt.Sprintf(`document.querySelector(%q).textContent === "0"`, member+` td[data-label="Backlog"]`))

	// A phone, with the detail open: nothing scrolls sideways.
	b.do("phone size", chromedp.EmulateViewport(390, 844))
	b.until("the detail on a phone", fmt.Sprintf(`document.querySelector(%q) !== null`, member))
	b.shot("phone-keyed")
	if !b.eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("the overview with a keyed consumer's detail scrolls sideways on a 390 px wide screen")
	}
	b.do("desktop size", chromedp.EmulateViewport(1280, 900))

	// A dead letter passed by a later event of its order.
	if code := s.post(t, "evt-k1", "o-k", 100); code != http.StatusAccepted {
		t.Fatalf("evt-k1: status %d", code)
	}
	hookbridgetest.Eventually(t, time.Minute, "evt-k1 dead-lettered", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE event_id = 'evt-k1'") == 1
	})
	if code := s.post(t, "evt-k2", "o-k", 200); code != http.StatusAccepted {
		t.Fatalf("evt-k2: status %d", code)
	}
	hookbridgetest.Eventually(t, time.Minute, "evt-k1 passed by evt-k2", func() bool {
		return s.db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE event_id = 'evt-k1' AND passed_by_event = 'evt-k2'") == 1
	})
	dl := s.id(t, "SELECT id FROM hookbridge.dead_letters WHERE event_id = 'evt-k1'")
	row := fmt.Sprintf(`#dl-list tr[data-id="%d"]`, dl)
	b.do("open the dead letters", chromedp.Click(css(`#nav a[data-page="dead-letters"]`)), chromedp.WaitVisible(css(row)))
	if got := b.text(row + ` td[data-label="Status"]`); !strings.Contains(got, "passed") {
		t.Errorf("the list shows the passed dead letter's status as %q, want it marked passed", got)
	}
	b.do("open the dead letter", chromedp.Click(css(row+" a")), chromedp.WaitVisible(css("#dl-requeue")))
	b.shot("dead-letter-passed")
	if got := b.text("#dl-ordering-key"); got != "o-k" {
		t.Errorf("ordering key shown as %q", got)
	}
	if got := b.text("#dl-passed-by"); !strings.Contains(got, "evt-k2") || !strings.Contains(got, "ago") {
		t.Errorf("passed by shown as %q, want evt-k2 and when", got)
	}
	if got := b.text("#dl-requeue-warning"); !strings.Contains(got, "out of order") || !strings.Contains(got, "evt-k2") {
		t.Errorf("the requeue warning reads %q", got)
	}
	fixed.Store(true)
	applied := func() int {
		return s.db.Count(t, "SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'orders' AND event_id = 'evt-k1'")
	}
	b.do("requeue once", chromedp.Click(css("#dl-requeue")))
	b.until("the confirmation", `document.getElementById("dl-requeue").textContent.startsWith("Confirm: apply out of order")`)
	b.shot("requeue-confirm")
	if n := applied(); n != 0 {
		t.Fatalf("the first click applied evt-k1 (%d inbox rows)", n)
	}
	b.do("confirm", chromedp.Click(css("#dl-requeue")))
	b.until("the out-of-order requeue reported", `document.getElementById("flash").textContent.includes("Applied out of order, after evt-k2")`)
	b.until("the dead letter resolved", `(document.getElementById("dl-detail-status")||{textContent:""}).textContent.includes("requeued")`)
	b.shot("requeued-out-of-order")
	if n := applied(); n != 1 {
		t.Fatalf("evt-k1 applied %d times after the confirmation, want 1", n)
	}
	if n := s.db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters WHERE id = $1 AND resolution = 'requeued'", dl); n != 1 {
		t.Error("the dead letter is not resolved requeued")
	}
	if ex := b.pageExceptions(); len(ex) > 0 {
		t.Errorf("the page threw: %v", ex)
	}
}
