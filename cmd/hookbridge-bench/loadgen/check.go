package loadgen

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/store"
)

// Check is the exactly-once check of one run, counted in the database: of
// the events the ingress accepted, every one has exactly one inbox row and
// one outbox message; every order.created one order, and every order.paid
// one change of its order (version 2, where an order no event changed has
// version 1).
type Check struct {
	Expected int `json:"expected"`
	// Paid is how many of them were order.paid events (see Options.PaidEvery).
	Paid   int `json:"paid,omitempty"`
	Inbox  int `json:"inbox_rows"`
	Orders int `json:"orders"`
	// OrdersChanged counts orders whose version is not 1 (paid ones), and
	// OrdersChangedTwice those above 2: an event applied twice, or an event
	// of another run touching this run's orders.
	OrdersChanged      int `json:"orders_changed"`
	OrdersChangedTwice int `json:"orders_changed_more_than_once"`
	Outbox             int `json:"outbox_rows"`
	// DeadLetters counts this run's events in hookbridge.dead_letters (-1
	// when the table does not exist).
	DeadLetters int      `json:"dead_letters"`
	NotAccepted int      `json:"not_accepted"`
	OK          bool     `json:"ok"`
	Problems    []string `json:"problems,omitempty"`

	missing []string // tables not found (the instance has not migrated)
}

// VerifyCounts counts what the run with runID left in the database.
// expected is how many distinct events the ingress accepted; notAccepted
// how many it never did (any is a failure: a sender would still retry).
// consumer and source are the inbox key parts (e.g. "orders", "demo").
func VerifyCounts(ctx context.Context, pool *pgxpool.Pool, consumer, source, runID string, expected, notAccepted int) (*Check, error) {
	c := &Check{Expected: expected, NotAccepted: notAccepted, DeadLetters: -1}
	prefix := runID + "-"
	var missing []string
	// count runs read when table exists and notes it missing otherwise.
	count := func(table string, read func() error) error {
		exists, err := store.TableExists(ctx, pool, table)
		if err != nil {
			return fmt.Errorf("look up %s: %w", table, err)
		}
		if !exists {
			missing = append(missing, table)
			return nil
		}
		if err := read(); err != nil {
			return fmt.Errorf("count %s: %w", table, err)
		}
		return nil
	}
	if err := count(store.TableInbox, func() (err error) {
		c.Inbox, err = store.InboxCountPrefix(ctx, pool, consumer, source, prefix)
		return err
	}); err != nil {
		return nil, err
	}
	if err := count("demo.orders", func() error {
		// The demo handler's own table: its SQL stays with the load tool.
		return pool.QueryRow(ctx, `
			SELECT count(*), count(*) FILTER (WHERE version <> 1), count(*) FILTER (WHERE version > 2) FROM demo.orders
			WHERE starts_with(order_id, $1)`, prefix).Scan(&c.Orders, &c.OrdersChanged, &c.OrdersChangedTwice)
	}); err != nil {
		return nil, err
	}
	if err := count(store.TableOutbox, func() (err error) {
		c.Outbox, err = store.OutboxCountPrefix(ctx, pool, consumer+":"+source+":"+prefix)
		return err
	}); err != nil {
		return nil, err
	}
	deadMissing := len(missing)
	if err := count(store.TableDeadLetters, func() (err error) {
		c.DeadLetters, err = store.DeadLetterCountPrefix(ctx, pool, consumer, prefix)
		return err
	}); err != nil {
		return nil, err
	}
	if len(missing) > deadMissing {
		c.DeadLetters = -1 // an older schema without dead letters
		missing = missing[:deadMissing]
	}
	c.missing = missing
	c.evaluate()
	return c, nil
}

// WithPaid sets how many of the expected events were order.paid events and
// checks the counts again.
func (c *Check) WithPaid(paid int) *Check {
	c.Paid = paid
	c.evaluate()
	return c
}

func (c *Check) evaluate() {
	c.Problems = nil
	bad := func(format string, args ...any) { c.Problems = append(c.Problems, fmt.Sprintf(format, args...)) }
	for _, t := range c.missing {
		bad("table %s does not exist", t)
	}
	if c.NotAccepted > 0 {
		bad("%d event(s) were never accepted by the ingress", c.NotAccepted)
	}
	if c.Inbox != c.Expected {
		bad("inbox rows = %d, want %d", c.Inbox, c.Expected)
	}
	if c.Orders != c.Expected-c.Paid {
		bad("orders = %d, want %d", c.Orders, c.Expected-c.Paid)
	}
	if c.OrdersChanged > c.Paid {
		bad("%d order(s) changed more than once (version <> 1 on %d, but %d were paid)", c.OrdersChanged-c.Paid, c.OrdersChanged, c.Paid)
	}
	if c.OrdersChanged < c.Paid {
		bad("%d paid order(s) not changed (version <> 1 on %d, but %d were paid)", c.Paid-c.OrdersChanged, c.OrdersChanged, c.Paid)
	}
	if c.OrdersChangedTwice > 0 {
		bad("%d order(s) changed more than once (version > 2)", c.OrdersChangedTwice)
	}
	if c.Outbox != c.Expected {
		bad("outbox rows = %d, want %d", c.Outbox, c.Expected)
	}
	if c.DeadLetters > 0 {
		bad("%d dead letter(s)", c.DeadLetters)
	}
	c.OK = len(c.Problems) == 0
}

func (c *Check) String() string {
	if c == nil {
		return "not run"
	}
	status := "PASS"
	if !c.OK {
		status = "FAIL"
	}
	s := fmt.Sprintf("%s: expected %d, inbox %d, orders %d, outbox %d", status, c.Expected, c.Inbox, c.Orders, c.Outbox)
	for _, p := range c.Problems {
		s += "\n  - " + p
	}
	return s
}
