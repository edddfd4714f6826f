package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/schema"
)

// ledgerSet is the ledger's migrations as the SQL consumer applies them.
func ledgerSet(t *testing.T) schema.Set {
	t.Helper()
	sub, err := fs.Sub(ledgerMigrations, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	return schema.Set{Name: ledgerConsumer, FS: sub}
}

// applyLedger runs the consumer's statements for one version of account
// in a transaction of its own, as the inbox transaction would.
func applyLedger(ctx context.Context, db *hookbridgetest.Database, account string, version int) error {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit it does nothing
	args := pgx.NamedArgs{"body": string(ledgerBody(account, version, time.Now())), "event_id": fmt.Sprintf("%s-v%d", account, version)}
	for i, st := range ledgerStatements {
		if _, err := tx.Exec(ctx, st, args); err != nil {
			return fmt.Errorf("statement %d: %w", i+1, err)
		}
	}
	return tx.Commit(ctx)
}

// The ledger's statements and the counts read from them find each broken
// promise: applies out of order, a version applied twice, accounts short
// of their last version, orders not paid or changed twice. A check that
// could not see them would pass any run.
func TestClusterCountsFindBrokenPromises(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, ledgerSet(t), orders.Migrations())
	ctx := t.Context()
	const run, versions = "cl-test", 3
	for _, a := range []struct {
		account  string
		versions []int
	}{
		{"a0", []int{1, 2, 3}},    // in order
		{"a1", []int{1, 3, 2}},    // 3 saw 1, 2 saw 3: two out of order, ends at 2 (stale)
		{"a2", []int{1, 1, 2, 3}}, // 1 twice; 2 and 3 in order
		{"a3", []int{1}},          // stale
	} {
		for _, v := range a.versions {
			if err := applyLedger(ctx, db, run+"-"+a.account, v); err != nil {
				t.Fatalf("%s v%d: %v", a.account, v, err)
			}
		}
	}
	// A blocked account's apply fails with a retryable error: not a data
	// (22) or constraint (23) error, which would dead-letter it at once.
	blocked := run + "-a4"
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ledger.blocks (account) VALUES ($1)`, blocked); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := applyLedger(ctx, db, blocked, 1); !errors.As(err, &pgErr) || pgErr.Code != "P0001" {
		t.Fatalf("blocked account's apply: %v, want SQLSTATE P0001", err)
	}
	if n := db.Count(t, `SELECT count(*) FROM ledger.applies WHERE account = $1`, blocked); n != 0 {
		t.Fatalf("blocked account applied %d times", n)
	}
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO demo.orders (order_id, status, amount_cents, currency, created_event_id, last_event_id, version)
		VALUES ($1 || '-o0', 'paid', 100, 'EUR', 'c0', 'p0', 2), ($1 || '-o1', 'created', 100, 'EUR', 'c1', 'c1', 1),
			($1 || '-o2', 'paid', 100, 'EUR', 'c2', 'p2', 3), ('other-o3', 'created', 100, 'EUR', 'c3', 'c3', 1)`, run); err != nil {
		t.Fatal(err)
	}

	k, err := countCluster(ctx, db.Pool, run, versions)
	if err != nil {
		t.Fatal(err)
	}
	want := clusterCounts{LedgerApplies: 11, LedgerApplied: 10, LedgerTwice: 1, OutOfOrder: 2, AccountsAtFinal: 2,
		Orders: 3, OrdersPaid: 1, OrdersChangedTwice: 1}
	got := k
	got.LastApply = time.Time{}
	if got != want {
		t.Fatalf("counts = %+v\nwant     %+v", got, want)
	}
	if k.LastApply.IsZero() {
		t.Error("no last apply time")
	}

	// The report names each of them, and fails.
	c := &cluster{o: ClusterOptions{Accounts: 4, Versions: versions, Orders: 3}, runID: run, sender: &clusterSender{}, prog: newProgress(18)}
	for range 18 {
		c.prog.add()
	}
	c.sender.accepted[0].Store(12)
	c.sender.accepted[1].Store(6)
	r := c.result(18, k)
	if r.OK || r.AppliedTwice != 2 || r.OutOfOrder != 2 || r.StaleAccounts != 2 || r.OrdersNotPaid != 2 || r.NotAccepted != 0 {
		t.Fatalf("report: %+v", r)
	}
	problems := strings.Join(r.Problems, "\n")
	for _, w := range []string{"2 applied twice", "2 ledger apply(s) out of order", "2 of 4 accounts not at version 3", "2 of 3 orders not paid",
		"ledger: 12 event(s) answered 2xx, 0 applied"} {
		if !strings.Contains(problems, w) {
			t.Errorf("problems lack %q:\n%s", w, problems)
		}
	}
}

// The configuration files, read as serve reads them, declare both sources
// keyed (or, after the change, neither) and the ledger's statements whole:
// a block scalar keeps the " #>>" a plain one would cut.
func TestClusterConfigAsServeReadsIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secrets := map[string]string{demoSource: "whsec_YQ==", ledgerSource: "whsec_Yg=="}
	for _, cc := range []clusterConfig{{secrets: secrets, ackWait: 5 * time.Second}, {secrets: secrets, unkeyed: true}} {
		path, err := cc.write(dir, fmt.Sprintf("unkeyed-%v.yaml", cc.unkeyed))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := app.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Sources) != 2 || len(cfg.Consumers) != 2 {
			t.Fatalf("%d sources, %d consumers", len(cfg.Sources), len(cfg.Consumers))
		}
		for _, s := range cfg.Sources {
			if k := s.OrderingKey; k == nil || k.None != cc.unkeyed || (!cc.unkeyed && k.Pointer == "") || s.Secrets[0] != secrets[s.Name] {
				t.Errorf("unkeyed %v: source %s: key %+v", cc.unkeyed, s.Name, k)
			}
		}
		ledger := cfg.Consumers[1]
		if ledger.Name != ledgerConsumer || ledger.SQL == nil || !slices.Equal([]string(ledger.SQL.Apply[ledgerType]), trimmed(ledgerStatements)) {
			t.Errorf("ledger consumer: %+v", ledger)
		}
		if ledger.AckWait != cc.ackWait || cfg.Consumers[0].AckWait != cc.ackWait {
			t.Errorf("ack_wait %s and %s, want %s", cfg.Consumers[0].AckWait, ledger.AckWait, cc.ackWait)
		}
		if _, err := os.Stat(filepath.Join(dir, ledger.SQL.Migrations, "0001_ledger.sql")); err != nil {
			t.Error(err)
		}
	}
}

// trimmed is sts each with a final newline, as a YAML block scalar reads.
func trimmed(sts []string) []string {
	out := make([]string, len(sts))
	for i, s := range sts {
		out[i] = s + "\n"
	}
	return out
}
