package loadgen

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/store"
)

// The configuration a cluster run deploys: the demo source and its orders
// consumer as hookbridge ships them, and a keyed source "ledger" applied by
// a consumer declared in SQL, whose tables record every apply with the
// version it saw before it, so that order is counted from the database.

//go:embed ledger/*.sql
var ledgerMigrations embed.FS

// Names of the ledger's source, consumer and event type.
const (
	ledgerSource   = "ledger"
	ledgerConsumer = "ledger"
	ledgerType     = "ledger.entry"
	ordersConsumer = "orders"
	demoSource     = "demo"
)

// ledgerStatements are the SQL consumer's statements for ledger.entry, in
// the order they run inside the inbox transaction: refuse a blocked
// account (a retryable error), make sure the account's row exists, record
// the apply with the version the row holds (under its lock, so that two
// applies of one account, were they ever concurrent, see each other), and
// set the new version.
var ledgerStatements = []string{
	`SELECT ledger.refuse_blocked(@body::jsonb #>> '{data,account}')`,
	`INSERT INTO ledger.accounts (account, version)
VALUES (@body::jsonb #>> '{data,account}', 0)
ON CONFLICT (account) DO NOTHING`,
	`INSERT INTO ledger.applies (event_id, account, version, seen_version)
SELECT @event_id, account, (@body::jsonb #>> '{data,version}')::integer, version
FROM ledger.accounts WHERE account = @body::jsonb #>> '{data,account}'
FOR UPDATE`,
	`UPDATE ledger.accounts SET version = (@body::jsonb #>> '{data,version}')::integer
WHERE account = @body::jsonb #>> '{data,account}'`,
}

// clusterConfig is one configuration of a cluster run.
type clusterConfig struct {
	secrets map[string]string // source → signing secret
	unkeyed bool              // both sources with ordering_key: none
	ackWait time.Duration     // 0: hookbridge's default
}

// yaml is the configuration file; the ledger's migrations are in the
// directory "ledger" next to it.
func (c clusterConfig) yaml() []byte {
	var b strings.Builder
	key := func(pointer string) string {
		if c.unkeyed {
			return "none"
		}
		return "{pointer: " + pointer + "}"
	}
	b.WriteString("sources:\n")
	for _, s := range []struct{ name, pointer string }{{demoSource, "/data/order_id"}, {ledgerSource, "/data/account"}} {
		fmt.Fprintf(&b, "  - name: %s\n    scheme: standard-webhooks\n    secrets: [%q]\n    ordering_key: %s\n", s.name, c.secrets[s.name], key(s.pointer))
	}
	ackWait := ""
	if c.ackWait > 0 {
		ackWait = fmt.Sprintf("    ack_wait: %s\n", c.ackWait)
	}
	b.WriteString("consumers:\n")
	fmt.Fprintf(&b, "  - name: %s\n    handler: orders\n    sources: [%s]\n%s", ordersConsumer, demoSource, ackWait)
	fmt.Fprintf(&b, "  - name: %s\n    sources: [%s]\n    event_types: [%s]\n%s    sql:\n      migrations: ./ledger\n      apply:\n        %s:\n",
		ledgerConsumer, ledgerSource, ledgerType, ackWait, ledgerType)
	for _, st := range ledgerStatements {
		b.WriteString("          - |\n")
		for l := range strings.SplitSeq(st, "\n") {
			b.WriteString("            " + l + "\n")
		}
	}
	return []byte(b.String())
}

// write writes the configuration to dir/name and the ledger's migrations
// to dir/ledger, and returns the file's path.
func (c clusterConfig) write(dir, name string) (string, error) {
	mig := filepath.Join(dir, "ledger")
	if err := os.MkdirAll(mig, 0o700); err != nil {
		return "", fmt.Errorf("ledger migrations: %w", err)
	}
	files, err := fs.Glob(ledgerMigrations, "ledger/*.sql")
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, err := ledgerMigrations.ReadFile(f)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(mig, filepath.Base(f)), b, 0o600); err != nil {
			return "", fmt.Errorf("ledger migrations: %w", err)
		}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, c.yaml(), 0o600); err != nil {
		return "", fmt.Errorf("configuration: %w", err)
	}
	return path, nil
}

// ledgerBody is the webhook body of an account's version.
func ledgerBody(account string, version int, now time.Time) []byte {
	return fmt.Appendf(nil, `{"type":%q,"timestamp":%q,"data":{"account":%q,"version":%d}}`,
		ledgerType, now.UTC().Format(time.RFC3339), account, version)
}

// clusterCounts is what a cluster run left in the database, counted over
// the run's accounts and orders.
type clusterCounts struct {
	// LedgerInbox and OrdersInbox are the consumers' inbox rows: the
	// events each applied.
	LedgerInbox int
	OrdersInbox int
	// LedgerApplies is the ledger's apply rows; LedgerApplied the distinct
	// (account, version) among them, LedgerTwice the rest.
	LedgerApplies int
	LedgerApplied int
	LedgerTwice   int
	// OutOfOrder counts first applies of a version that saw another
	// version than the one before it.
	OutOfOrder int
	// AccountsAtFinal counts accounts whose version is the last one sent.
	AccountsAtFinal int
	// Orders counts the run's orders, OrdersPaid those paid by exactly one
	// change (version 2), OrdersChangedTwice those changed more often.
	Orders             int
	OrdersPaid         int
	OrdersChangedTwice int
	DeadLetters        int
	// LastApply is when the last apply ran (zero: none did).
	LastApply time.Time
}

// countApplied counts the run's inbox rows of both consumers: what the
// settle loop and the progress line watch (two index range scans).
func countApplied(ctx context.Context, pool *pgxpool.Pool, runID string) (ledger, orders int, err error) {
	prefix := runID + "-"
	if ledger, err = store.InboxCountPrefix(ctx, pool, ledgerConsumer, ledgerSource, prefix); err != nil {
		return 0, 0, fmt.Errorf("count the ledger's inbox rows: %w", err)
	}
	if orders, err = store.InboxCountPrefix(ctx, pool, ordersConsumer, demoSource, prefix); err != nil {
		return 0, 0, fmt.Errorf("count the orders' inbox rows: %w", err)
	}
	return ledger, orders, nil
}

// countCluster counts what the run runID left; versions is the last
// version of every account.
func countCluster(ctx context.Context, pool *pgxpool.Pool, runID string, versions int) (clusterCounts, error) {
	var c clusterCounts
	prefix := runID + "-"
	var err error
	if c.LedgerInbox, c.OrdersInbox, err = countApplied(ctx, pool, runID); err != nil {
		return c, err
	}
	// The ledger's and the demo's own tables: their SQL stays with the
	// load tool.
	var ledgerLast, ordersLast *time.Time
	err = pool.QueryRow(ctx, `
		WITH a AS (
			SELECT version, seen_version, applied_at,
				row_number() OVER (PARTITION BY account, version ORDER BY seq) AS nth
			FROM ledger.applies WHERE starts_with(account, $1))
		SELECT count(*), count(*) FILTER (WHERE nth = 1), count(*) FILTER (WHERE nth > 1),
			count(*) FILTER (WHERE nth = 1 AND seen_version <> version - 1), max(applied_at)
		FROM a`, prefix).Scan(&c.LedgerApplies, &c.LedgerApplied, &c.LedgerTwice, &c.OutOfOrder, &ledgerLast)
	if err != nil {
		return c, fmt.Errorf("count the ledger's applies: %w", err)
	}
	err = pool.QueryRow(ctx, `SELECT count(*) FROM ledger.accounts WHERE starts_with(account, $1) AND version = $2`,
		prefix, versions).Scan(&c.AccountsAtFinal)
	if err != nil {
		return c, fmt.Errorf("count the ledger's accounts: %w", err)
	}
	err = pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE status = 'paid' AND version = 2), count(*) FILTER (WHERE version > 2), max(updated_at)
		FROM demo.orders WHERE starts_with(order_id, $1)`, prefix).Scan(&c.Orders, &c.OrdersPaid, &c.OrdersChangedTwice, &ordersLast)
	if err != nil {
		return c, fmt.Errorf("count the orders: %w", err)
	}
	for _, name := range []string{ledgerConsumer, ordersConsumer} {
		n, err := store.DeadLetterCountPrefix(ctx, pool, name, prefix)
		if err != nil {
			return c, fmt.Errorf("count the dead letters of %s: %w", name, err)
		}
		c.DeadLetters += n
	}
	for _, t := range []*time.Time{ledgerLast, ordersLast} {
		if t != nil && t.After(c.LastApply) {
			c.LastApply = *t
		}
	}
	return c, nil
}
