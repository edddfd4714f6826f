package acceptance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// demoConfig is the default demo source and orders consumer, written out
// (the demo source keyed by /data/order_id), with a short backoff where
// the test says so.
const demoConfig = `
sources:
  - name: demo
    scheme: standard-webhooks
    secret_env: HOOKBRIDGE_DEMO_SECRET
    ordering_key: %s
consumers:
  - name: orders
    handler: orders
    sources: [demo]
    backoff: [%s]
`

// Two serve processes, the demo source keyed: each order.paid is sent
// (to one) and answered 202 before its order.created (to the other).
// Every order ends paid at version 2, every event applied once, nothing
// dead-lettered; each paid event was postponed at least once, and the
// processes' metrics count it. The backoff is an hour: a postponed event
// applies within the test's minute only because it is retried right after
// its order.created.
func TestServesApplyPaidBeforeCreated(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	d := newDeployment(t, db)
	d.writeConfig(fmt.Sprintf(demoConfig, "{pointer: /data/order_id}", "1h"), nil)
	hb := []*serveProc{d.serve("hb1"), d.serve("hb2")}
	const n = 40
	for i := range n {
		order := fmt.Sprintf("o-%d", i)
		hb[i%2].send(t, "demo", order+"-paid", orders.WebhookBody(orders.Paid, order, 500))
		hb[(i+1)%2].send(t, "demo", order+"-created", orders.WebhookBody(orders.Created, order, 500))
	}
	hookbridgetest.Eventually(t, time.Minute, fmt.Sprintf("%d orders paid at version 2", n), func() bool {
		return db.Count(t, `SELECT count(*) FROM demo.orders WHERE status = 'paid' AND version = 2`) == n
	})
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); got != 0 {
		t.Fatalf("%d dead letters, want none\n%s", got, logs(hb...))
	}
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'orders'`); got != 2*n {
		t.Fatalf("%d inbox rows, want %d", got, 2*n)
	}
	hookbridgetest.Eventually(t, time.Minute, "the postponements counted", func() bool {
		postponed := 0.0
		for _, p := range hb {
			postponed += p.counter(t, "hookbridge_consumer_events_total", "consumer", "orders", "outcome", "postponed")
		}
		return postponed >= n
	})
}

// ledgerConfig is a keyed SQL consumer: account A's entry v1 fails while
// a block row names the account.
const ledgerConfig = `
sources:
  - name: bank
    scheme: standard-webhooks
    secret_env: HOOKBRIDGE_DEMO_SECRET
    ordering_key: {pointer: /data/account}
consumers:
  - name: ledger
    sources: [bank]
    max_deliver: 1000
    backoff: [200ms]
    sql:
      migrations: ./migrations/ledger
      apply:
        entry.posted:
          - "SELECT ledger.check(@body::jsonb #>> '{data,account}')"
          - "INSERT INTO ledger.applied (account, v) VALUES (@body::jsonb #>> '{data,account}', (@body::jsonb #>> '{data,v}')::int)"
`

const ledgerMigration = `
CREATE SCHEMA ledger;
CREATE TABLE ledger.applied (id bigserial PRIMARY KEY, account text NOT NULL, v int NOT NULL);
CREATE TABLE ledger.block (account text PRIMARY KEY);
-- Fails (retryably: SQLSTATE P0001) while a block row names the account.
CREATE FUNCTION ledger.check(acct text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger.block WHERE account = acct) THEN
        RAISE EXCEPTION 'account % is blocked', acct;
    END IF;
END $$;
`

func entry(account string, v int) []byte {
	return fmt.Appendf(nil, `{"type":"entry.posted","data":{"account":%q,"v":%d}}`, account, v)
}

// replayItems runs `hookbridge replay` with args and --json, and returns
// its items by event id and its summary.
func replayItems(t *testing.T, d *deployment, args ...string) (map[string]map[string]any, map[string]any) {
	t.Helper()
	code, out, errOut := d.run(append([]string{"replay", "--json"}, args...)...)
	items, summary := map[string]map[string]any{}, map[string]any(nil)
	for _, obj := range jsonLines(t, out) {
		if s, ok := obj["summary"].(map[string]any); ok {
			summary = s
			continue
		}
		items[fmt.Sprint(obj["event_id"])] = obj
	}
	if summary == nil {
		t.Fatalf("replay %v exited %d without a summary:\n%s\n%s", args, code, out, errOut)
	}
	return items, summary
}

// Two serve processes run a keyed SQL consumer; A's v1 fails while a
// block row exists, with v2 and v3 behind it. A dry run and then a range
// replay, run from the command line while the processes serve, hold v2
// and v3 (and say why); once the block is lifted the applies come 1, 2,
// 3, once each. B, another key, goes on meanwhile.
func TestRangeReplayWhileServingKeepsTheKeysOrder(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	d := newDeployment(t, db)
	d.writeConfig(ledgerConfig, map[string]string{"migrations/ledger/0001_ledger.sql": ledgerMigration})
	hb := []*serveProc{d.serve("hb1"), d.serve("hb2")}
	execSQL(t, db, `INSERT INTO ledger.block VALUES ('A')`)
	for v := 1; v <= 3; v++ {
		hb[v%2].send(t, "bank", fmt.Sprintf("A-%d", v), entry("A", v))
	}
	hb[0].send(t, "bank", "B-1", entry("B", 1))
	hookbridgetest.Eventually(t, time.Minute, "B applied and A's v1 failing", func() bool {
		return db.Count(t, `SELECT count(*) FROM ledger.applied WHERE account = 'B'`) == 1 &&
			db.Count(t, `SELECT count(*) FROM hookbridge.delivery_failures WHERE consumer = 'ledger' AND event_id = 'A-1' AND failures > 0`) == 1
	})

	items, summary := replayItems(t, d, "--consumer", "ledger", "--since", "1h", "--dry-run")
	if it := items["A-1"]; it["outcome"] != "new" || !strings.Contains(fmt.Sprint(it["error"]), "the live consumer is failing it") {
		t.Fatalf("dry run: A-1 %v, want new, noting that the live consumer is failing it", it)
	}
	for _, id := range []string{"A-2", "A-3"} {
		if it := items[id]; it["outcome"] != "held" {
			t.Fatalf("dry run: %s %v, want held", id, it)
		}
	}
	if summary["held"] != 2.0 {
		t.Fatalf("dry run summary %v, want 2 held", summary)
	}

	items, summary = replayItems(t, d, "--consumer", "ledger", "--since", "1h")
	if items["A-1"]["outcome"] != "failed" || items["A-2"]["outcome"] != "held" || items["A-3"]["outcome"] != "held" {
		t.Fatalf("replay: A-1 %v, A-2 %v, A-3 %v; want failed, held, held", items["A-1"], items["A-2"], items["A-3"])
	}
	if summary["held"] != 2.0 || summary["failed"] != 1.0 {
		t.Fatalf("replay summary %v, want 1 failed and 2 held", summary)
	}
	if got := db.Count(t, `SELECT count(*) FROM ledger.applied WHERE account = 'A'`); got != 0 {
		t.Fatalf("A applied %d times while its v1 fails", got)
	}

	execSQL(t, db, `DELETE FROM ledger.block`)
	hookbridgetest.Eventually(t, time.Minute, "A's three entries applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM ledger.applied WHERE account = 'A'`) == 3
	})
	if got := versions(t, db, `SELECT v FROM ledger.applied WHERE account = 'A' ORDER BY id`); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("A applied as %v, want [1 2 3]\n%s", got, logs(hb...))
	}
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'ledger'`); got != 4 {
		t.Fatalf("%d inbox rows, want 4", got)
	}
}

// An ingress-only process with the key on accepts N events; then two
// serve processes with every role and ordering_key: none apply all N.
func TestKeyTurnedOffAfterAnIngressAloneAcceptedKeyedEvents(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	d := newDeployment(t, db)
	d.writeConfig(fmt.Sprintf(demoConfig, "{pointer: /data/order_id}", "1s"), nil)
	ingress := d.serve("ingress", "--role", "ingress")
	const n = 50
	for i := range n {
		order := fmt.Sprintf("o-%d", i)
		ingress.send(t, "demo", order+"-created", orders.WebhookBody(orders.Created, order, 500))
	}
	ingress.stop()
	d.writeConfig(fmt.Sprintf(demoConfig, "none", "1s"), nil)
	hb := []*serveProc{d.serve("hb1"), d.serve("hb2")}
	hookbridgetest.Eventually(t, time.Minute, fmt.Sprintf("the %d keyed events applied with the key turned off", n), func() bool {
		return db.Count(t, `SELECT count(*) FROM demo.orders`) == n
	})
	if got := db.Count(t, `SELECT count(*) FROM hookbridge.inbox WHERE consumer = 'orders'`); got != n {
		t.Fatalf("%d inbox rows, want %d\n%s", got, n, logs(hb...))
	}
}

func execSQL(t *testing.T, db *hookbridgetest.Database, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// versions are the ints query returns, in its order.
func versions(t *testing.T, db *hookbridgetest.Database, query string) []int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
