package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// recordingBatch is a BatchHandler that records its calls.
type recordingBatch struct {
	mu    *sync.Mutex
	calls *[]string
	inner consumer.BatchHandler
}

func (r recordingBatch) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	r.note("Handle " + ev.ID)
	return r.inner.Handle(ctx, tx, ev)
}

func (r recordingBatch) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	r.note("HandleBatch " + strings.Join(ids, ","))
	return r.inner.HandleBatch(ctx, tx, evs)
}

func (r recordingBatch) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.calls = append(*r.calls, s)
}

// Mux.HandleBatch applies maximal runs of one type in stream order, with
// the type's HandleBatch where it has one and Handle per event where it
// has not: an account opened and then charged in one batch ends charged,
// and a charge between two openings sees the first only.
func TestMuxHandleBatchAppliesRunsInStreamOrder(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, accountsMigrations())
	var mu sync.Mutex
	var calls []string
	perEvent := accountsHandler()
	mux := consumer.NewMux()
	mux.Register(accountOpened, recordingBatch{mu: &mu, calls: &calls, inner: openBatch{}})
	mux.RegisterFunc(accountCharged, func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		mu.Lock()
		calls = append(calls, "Handle "+ev.ID)
		mu.Unlock()
		return perEvent.Handle(ctx, tx, ev)
	})
	evs := []consumer.Event{
		accountEvent("e1", accountOpened, accountBody{Account: "a", Amount: 100}, 1),
		accountEvent("e2", accountOpened, accountBody{Account: "b", Amount: 100}, 2),
		accountEvent("e3", accountCharged, accountBody{Account: "a", Amount: 10}, 3),
		accountEvent("e4", accountCharged, accountBody{Account: "b", Amount: 1}, 4),
		accountEvent("e5", accountOpened, accountBody{Account: "c", Amount: 50}, 5),
		accountEvent("e6", accountCharged, accountBody{Account: "c", Amount: 5}, 6),
	}
	for i, r := range engine.ApplyBatch(context.Background(), db.Pool, "accounts", mux, evs) {
		if r.Outcome != consumer.Processed {
			t.Fatalf("event %d: %v %v", i, r.Outcome, r.Err)
		}
	}
	want := "HandleBatch e1,e2 | Handle e3 | Handle e4 | HandleBatch e5 | Handle e6"
	if got := strings.Join(calls, " | "); got != want {
		t.Fatalf("calls:\n got %s\nwant %s", got, want)
	}
	if n := db.Count(t, "SELECT count(*) FROM accounts.accounts WHERE (account_id, balance, version) IN (('a', 90, 2), ('b', 99, 2), ('c', 45, 2))"); n != 3 {
		t.Fatalf("%d of 3 accounts end as charged after being opened", n)
	}
}

// A handler that panics in a batch fails its own event only; the panic
// is an error, and every other event of the batch is applied.
func TestBatchHandlerPanicFailsOnlyItsEvent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, accountsMigrations())
	var evs []consumer.Event
	for i := range 100 {
		b := accountBody{Account: fmt.Sprintf("a%d", i), Amount: 1}
		if i == 37 {
			b.Fail = "panic"
		}
		evs = append(evs, accountEvent(fmt.Sprintf("e%d", i), accountOpened, b, uint64(i+1)))
	}
	for i, r := range engine.ApplyBatch(context.Background(), db.Pool, "accounts", accountsBatchHandler(), evs) {
		switch {
		case i == 37 && (r.Outcome != consumer.Failed || r.Err == nil || !strings.Contains(r.Err.Error(), "panicked")):
			t.Fatalf("panicking event: %v %v, want failed with the panic", r.Outcome, r.Err)
		case i != 37 && r.Outcome != consumer.Processed:
			t.Fatalf("event %d: %v %v, want processed", i, r.Outcome, r.Err)
		}
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.inbox"); n != 99 {
		t.Fatalf("inbox rows = %d, want 99", n)
	}
	if n := db.Count(t, "SELECT count(*) FROM accounts.accounts"); n != 99 {
		t.Fatalf("accounts = %d, want 99", n)
	}
}

// A Mux routes a provider's spelling of a type to the handler registered
// under another spelling with the same subject form: the consumer
// receives both (Shopify's "orders/create" for a handler registered as
// "orders.create"), and neither may be dead-lettered for want of a
// handler.
func TestMuxRoutesSpellingsOfOneSubject(t *testing.T) {
	t.Parallel()
	forBatchSizes(t, func(t *testing.T, bs int) {
		db := hookbridgetest.Postgres(t)
		ns := hookbridgetest.NATS(t)
		ns.EnsureHooks(t)
		var mu sync.Mutex
		got := map[string][]string{} // registered type → event types it handled
		mux := consumer.NewMux()
		for _, registered := range []string{"orders.create", "shop.items/update", "deploy:staging"} {
			mux.RegisterFunc(registered, func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
				mu.Lock()
				defer mu.Unlock()
				got[registered] = append(got[registered], ev.Type)
				return nil
			})
		}
		startConsumer(t, db, ns, bs, engine.Options{Name: "spellings", EventTypes: mux.EventTypes(), Handler: mux,
			BatchWait: 50 * time.Millisecond, Concurrency: 1})
		for i, typ := range []string{"orders/create", "orders.create", "shop/items.update", "deploy:staging"} {
			ns.PublishHook(t, "shop", fmt.Sprintf("e%d", i), typ, []byte(`{}`))
		}
		hookbridgetest.Eventually(t, time.Minute, "every event applied", func() bool {
			return db.Count(t, "SELECT count(*) FROM hookbridge.inbox") == 4
		})
		if n := db.Count(t, "SELECT count(*) FROM hookbridge.dead_letters"); n != 0 {
			t.Fatalf("%d dead letters, want 0", n)
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[string][]string{
			"orders.create":     {"orders/create", "orders.create"},
			"shop.items/update": {"shop/items.update"},
			"deploy:staging":    {"deploy:staging"},
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("handled %v, want %v", got, want)
		}
	})
}

// Two registered types with one subject form would make routing a third
// spelling ambiguous: Register refuses the second, as it refuses a type
// registered twice.
func TestMuxRefusesTwoTypesWithOneSubject(t *testing.T) {
	t.Parallel()
	mux := consumer.NewMux()
	mux.RegisterFunc("orders.create", func(context.Context, pgx.Tx, consumer.Event) error { return nil })
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "orders/create") {
			t.Fatalf("panic = %v, want one naming both types", p)
		}
	}()
	mux.RegisterFunc("orders/create", func(context.Context, pgx.Tx, consumer.Event) error { return nil })
}
