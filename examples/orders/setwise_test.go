package orders

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

func event(id, typ string, body []byte) consumer.Event {
	return consumer.Event{Source: "demo", ID: id, Type: typ, Body: body}
}

func orderBody(typ, orderID string, amount int64, currency string) []byte {
	return fmt.Appendf(nil, `{"type":%q,"timestamp":"2026-01-02T03:04:05Z","data":{"order_id":%q,"amount_cents":%d,"currency":%q}}`,
		typ, orderID, amount, currency)
}

// outcome is how applying one event ended, as the consumer tells it apart.
func outcome(err error) string {
	switch {
	case err == nil:
		return "applied"
	case consumer.IsPermanent(err):
		return "permanent"
	case errors.Is(err, ErrUnknownOrder):
		return "unknown-order"
	default:
		return "error: " + err.Error()
	}
}

// applyPerEvent applies evs one by one, each in a transaction of its own,
// as a consumer at batch size 1 does.
func applyPerEvent(t *testing.T, db *hookbridgetest.Database, h *consumer.Mux, evs []consumer.Event) []string {
	t.Helper()
	ctx := context.Background()
	out := make([]string, len(evs))
	for i, ev := range evs {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		herr := h.Handle(ctx, tx, ev)
		out[i] = outcome(herr)
		if herr != nil {
			err = tx.Rollback(ctx)
		} else {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// applySetWise applies each batch in one transaction through the Mux's
// HandleBatch, narrowing a failed set down by halves under savepoints,
// left half first, to the events that fail alone, which a consumer does
// in the same order. It returns each event's outcome and how many
// HandleBatch calls it took.
func applySetWise(t *testing.T, db *hookbridgetest.Database, h *consumer.Mux, batches [][]consumer.Event) ([]string, int) {
	t.Helper()
	ctx := context.Background()
	var out []string
	calls := 0
	for _, batch := range batches {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res := make([]string, len(batch))
		var apply func(lo, hi int)
		apply = func(lo, hi int) {
			sp, err := tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			calls++
			herr := h.HandleBatch(ctx, sp, batch[lo:hi])
			if herr == nil {
				if err := sp.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				for i := lo; i < hi; i++ {
					res[i] = "applied"
				}
				return
			}
			if err := sp.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if hi-lo == 1 {
				res[lo] = outcome(herr)
				return
			}
			mid := (lo + hi) / 2
			apply(lo, mid)
			apply(mid, hi)
		}
		apply(0, len(batch))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		out = append(out, res...)
	}
	return out, calls
}

// state is everything the handlers write, as comparable text: the orders
// (all but updated_at) and the outbox rows in insertion order, with
// key_seq as its rank within the key.
func state(t *testing.T, db *hookbridgetest.Database) (orders, outbox []string) {
	t.Helper()
	ctx := context.Background()
	read := func(q string) []string {
		rows, err := db.Pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	orders = read(`SELECT concat_ws('|', order_id, status, amount_cents, paid_cents, currency, created_event_id, last_event_id, version)
		FROM demo.orders ORDER BY order_id`)
	outbox = read(`SELECT concat_ws('|', event_id, subject, encode(payload, 'escape'), coalesce(ordering_key, '-'),
		       rank() OVER (PARTITION BY ordering_key ORDER BY key_seq))
		FROM hookbridge.outbox ORDER BY id`)
	return orders, outbox
}

// gen makes random order events: creations of new orders and of orders
// created before (another event id), payments and cancellations of known
// orders, of orders created later and of orders never created, several
// events for one order close together, and bodies that must be refused
// (not JSON, no order id, a negative amount, invalid UTF-8, an escaped
// lone surrogate).
type gen struct {
	r      *rand.Rand
	n      int
	orders []string
}

// order picks an order id and says whether it is a new one.
func (g *gen) order() (string, bool) {
	if len(g.orders) == 0 || g.r.IntN(4) == 0 {
		id := fmt.Sprintf("o-%d", len(g.orders))
		g.orders = append(g.orders, id)
		return id, true
	}
	// Recent orders more often, so one batch often holds several events
	// of one order.
	k := len(g.orders) - 1 - g.r.IntN(min(len(g.orders), 4))
	if g.r.IntN(3) == 0 {
		k = g.r.IntN(len(g.orders))
	}
	return g.orders[k], false
}

func (g *gen) next() consumer.Event {
	g.n++
	id := fmt.Sprintf("evt-%d", g.n)
	types := []string{Created, Paid, Cancelled}
	typ := types[g.r.IntN(len(types))]
	switch g.r.IntN(20) {
	case 0:
		return event(id, typ, []byte(`{"type":"`+typ+`","data":`))
	case 1:
		return event(id, typ, []byte(`{"type":"`+typ+`","data":{"amount_cents":5,"currency":"EUR"}}`))
	case 2:
		o, _ := g.order()
		return event(id, Created, orderBody(Created, o, -1, "EUR"))
	case 3:
		return event(id, typ, []byte(`{"type":"`+typ+`","data":{"order_id":"o-bad-`+"\xff\xfe"+`","amount_cents":5,"currency":"EUR"}}`))
	case 4:
		return event(id, typ, []byte(`{"type":"`+typ+`","data":{"order_id":"o-`+`\ud800`+`","amount_cents":5,"currency":"EUR"}}`))
	case 5:
		return event(id, typ, orderBody(typ, fmt.Sprintf("never-%d", g.r.IntN(3)), 7, "EUR"))
	}
	o, fresh := g.order()
	if fresh && g.r.IntN(5) > 0 {
		typ = Created // most orders are created before anything else happens to them
	}
	return event(id, typ, orderBody(typ, o, int64(g.r.IntN(10_000)), "EUR"))
}

// Applied set-wise (runs of one type through HandleBatch, failures
// narrowed down) and one event per transaction (Handle), random mixes of
// order events end in identical outcomes, identical demo.orders rows and
// identical outbox rows, in the same order, on fresh databases.
func TestSetWiseMatchesPerEvent(t *testing.T) {
	t.Parallel()
	s := hookbridgetest.Seed(t)
	t.Logf("seed %d (HOOKBRIDGE_TEST_SEED)", s)
	r := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	for round := range 6 {
		g := &gen{r: r}
		var batches [][]consumer.Event
		var all []consumer.Event
		for range 2 + r.IntN(4) {
			b := make([]consumer.Event, 1+r.IntN(60))
			for i := range b {
				b[i] = g.next()
			}
			batches = append(batches, b)
			all = append(all, b...)
		}
		seqDB, setDB := hookbridgetest.Postgres(t, Migrations()), hookbridgetest.Postgres(t, Migrations())
		h := Handler("orders")
		want := applyPerEvent(t, seqDB, h, all)
		got, calls := applySetWise(t, setDB, h, batches)
		for i := range all {
			if got[i] != want[i] {
				t.Errorf("round %d: event %d (%s %s) set-wise %q, per event %q", round, i, all[i].Type, all[i].Body, got[i], want[i])
			}
		}
		wo, wx := state(t, seqDB)
		go_, gx := state(t, setDB)
		if strings.Join(wo, "\n") != strings.Join(go_, "\n") {
			t.Errorf("round %d: demo.orders differ\nper event:\n%s\nset-wise:\n%s", round, strings.Join(wo, "\n"), strings.Join(go_, "\n"))
		}
		if strings.Join(wx, "\n") != strings.Join(gx, "\n") {
			t.Errorf("round %d: outbox differs\nper event:\n%s\nset-wise:\n%s", round, strings.Join(wx, "\n"), strings.Join(gx, "\n"))
		}
		applied := 0
		for _, o := range want {
			if o == "applied" {
				applied++
			}
		}
		if applied == 0 || applied == len(all) {
			t.Errorf("round %d: %d of %d events applied; the mix should have both", round, applied, len(all))
		}
		t.Logf("round %d: %d events in %d batches, %d applied, %d orders, %d outbox rows, %d HandleBatch calls",
			round, len(all), len(batches), applied, len(wo), len(wx), calls)
	}
}

// Within one run, events of one order apply in stream order: of two
// payments the last one wins and each raises the version; of two
// creations with different event ids the first wins and only it is
// announced; a payment of an order that does not exist fails the run
// with ErrUnknownOrder and leaves nothing behind once rolled back.
func TestRunOfOneOrder(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, Migrations())
	ctx := context.Background()
	h := Handler("orders")
	batch := []consumer.Event{
		event("e1", Created, orderBody(Created, "o-1", 500, "EUR")),
		event("e2", Created, orderBody(Created, "o-1", 900, "USD")),
		event("e3", Paid, orderBody(Paid, "o-1", 100, "EUR")),
		event("e4", Paid, orderBody(Paid, "o-1", 450, "EUR")),
	}
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return h.HandleBatch(ctx, tx, batch) }); err != nil {
		t.Fatal(err)
	}
	orders, outbox := state(t, db)
	if want := "o-1|paid|500|450|EUR|e1|e4|3"; len(orders) != 1 || orders[0] != want {
		t.Fatalf("orders = %q, want %q", orders, want)
	}
	var ids []string
	for _, o := range outbox {
		ids = append(ids, strings.SplitN(o, "|", 2)[0])
	}
	if got := strings.Join(ids, ","); got != "orders:demo:e1,orders:demo:e3,orders:demo:e4" {
		t.Fatalf("outbox ids = %s", got)
	}

	unknown := []consumer.Event{
		event("e5", Paid, orderBody(Paid, "o-1", 1, "EUR")),
		event("e6", Paid, orderBody(Paid, "o-404", 1, "EUR")),
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return h.HandleBatch(ctx, tx, unknown) })
	if !errors.Is(err, ErrUnknownOrder) || consumer.IsPermanent(err) || !strings.Contains(err.Error(), "o-404") {
		t.Fatalf("run with an unknown order: err = %v, want a retryable ErrUnknownOrder naming o-404", err)
	}
	if o, x := state(t, db); o[0] != orders[0] || len(x) != len(outbox) {
		t.Fatalf("a failed run left changes: %q, %d outbox rows", o, len(x))
	}
}

// A validly signed body with invalid UTF-8 in a string field (or an
// escaped lone surrogate) is refused as permanent, per event and set-wise,
// instead of being stored with U+FFFD in place of the bytes; a body that
// really carries U+FFFD is applied as sent.
func TestInvalidUTF8IsPermanent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, Migrations())
	ctx := context.Background()
	h := Handler("orders")
	bad := map[string][]byte{
		"order_id bytes": []byte(`{"type":"order.created","data":{"order_id":"o-` + "\xc3\x28" + `","amount_cents":5,"currency":"EUR"}}`),
		"currency bytes": []byte(`{"type":"order.created","data":{"order_id":"o-2","amount_cents":5,"currency":"EU` + "\xff" + `"}}`),
		"timestamp":      []byte(`{"type":"order.created","timestamp":"` + "\xed\xa0\x80" + `","data":{"order_id":"o-3","amount_cents":5,"currency":"EUR"}}`),
		"surrogate":      []byte(`{"type":"order.created","data":{"order_id":"o-\udc00","amount_cents":5,"currency":"EUR"}}`),
	}
	for name, body := range bad {
		ev := event("bad-"+strings.ReplaceAll(name, " ", "-"), Created, body)
		for _, how := range []string{"Handle", "HandleBatch"} {
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				if how == "Handle" {
					return h.Handle(ctx, tx, ev)
				}
				return h.HandleBatch(ctx, tx, []consumer.Event{ev})
			})
			if !consumer.IsPermanent(err) {
				t.Errorf("%s via %s: err = %v, want permanent", name, how, err)
			}
		}
	}
	if n := db.Count(t, `SELECT count(*) FROM demo.orders`); n != 0 {
		t.Fatalf("%d orders stored from invalid bodies", n)
	}
	meant := event("fffd", Created, []byte(`{"type":"order.created","data":{"order_id":"o-`+"\uFFFD"+`","amount_cents":5,"currency":"EUR"}}`))
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return h.Handle(ctx, tx, meant) }); err != nil {
		t.Fatalf("body carrying U+FFFD: %v", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM demo.orders WHERE order_id = 'o-' || U&'\FFFD'`); n != 1 {
		t.Fatal("the order carrying U+FFFD was not stored as sent")
	}
}
