package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// auditConfig is the demo source keyed, the orders consumer and, when
// with, a keyed SQL consumer "audit" beside it.
func auditConfig(with bool) string {
	c := fmt.Sprintf(demoConfig, "{pointer: /data/order_id}", "1s")
	if with {
		c += `  - name: audit
    sources: [demo]
    event_types: [order.created]
    sql:
      migrations: ./migrations/audit
      apply:
        order.created: "INSERT INTO audit.log (event_id) VALUES (@event_id)"
`
	}
	return c
}

var auditMigration = map[string]string{"migrations/audit/0001_audit.sql": `
CREATE SCHEMA audit;
CREATE TABLE audit.log (event_id text PRIMARY KEY);
`}

// A keyed consumer is taken out of the configuration while its partition
// durables hold a backlog (an ingress alone accepted events for it). Two
// serve processes without it report each of those durables as stranding
// its messages, on /readyz, with the counts adding up to the backlog and
// the command that removes them; `hookbridge consumers delete audit`
// removes every one, and the warning goes.
func TestRemovedKeyedConsumerIsReportedAndDeleted(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, orders.Migrations())
	d := newDeployment(t, db)
	d.writeConfig(auditConfig(true), auditMigration)
	nc, err := nats.Connect(d.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	first := d.serve("first")
	hookbridgetest.Eventually(t, time.Minute, "audit's durables created", func() bool {
		return len(auditDurables(t, js)) == 1+stream.DefaultPartitions // its own and one per partition
	})
	first.stop()
	ingress := d.serve("ingress", "--role", "ingress")
	const n = 30
	for i := range n {
		order := fmt.Sprintf("o-%d", i)
		ingress.send(t, "demo", order+"-created", orders.WebhookBody(orders.Created, order, 500))
	}
	ingress.stop()

	d.writeConfig(auditConfig(false), nil)
	hb := []*serveProc{d.serve("hb1"), d.serve("hb2")}
	hookbridgetest.Eventually(t, time.Minute, "the orders applied", func() bool {
		return db.Count(t, `SELECT count(*) FROM demo.orders`) == n
	})
	held := regexp.MustCompile(`^durable (audit~p\d+) on HOOKS belongs to no configured consumer and holds (\d+) unapplied message\(s\): .*hookbridge consumers delete audit~p\d+`)
	for _, p := range hb {
		hookbridgetest.Eventually(t, time.Minute, p.name+" warns of audit's backlog", func() bool {
			total := 0
			for _, w := range readyzWarnings(t, p) {
				if m := held.FindStringSubmatch(w); m != nil {
					k, _ := strconv.Atoi(m[2])
					total += k
				}
			}
			return total == n
		})
	}
	if got := db.Count(t, `SELECT count(*) FROM audit.log`); got != 0 {
		t.Fatalf("audit applied %d events after it was taken out of the configuration", got)
	}

	code, out, errOut := d.run("consumers", "delete", "audit")
	if code != 0 || !strings.HasPrefix(out, "deleted audit, audit~p00, ") || !strings.Contains(out, fmt.Sprintf("%d messages not received", n)) {
		t.Fatalf("consumers delete audit: exit %d\n%s%s", code, out, errOut)
	}
	if left := auditDurables(t, js); len(left) != 0 {
		t.Fatalf("durables %v left after consumers delete audit", left)
	}
	for _, p := range hb {
		hookbridgetest.Eventually(t, time.Minute, p.name+" no longer warns", func() bool {
			return len(readyzWarnings(t, p)) == 0
		})
	}
}

// auditDurables are the durables of consumer audit on HOOKS.
func auditDurables(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	s, err := js.Stream(context.Background(), stream.Hooks)
	if err != nil {
		return nil
	}
	var out []string
	names := s.ConsumerNames(context.Background())
	for name := range names.Name() {
		if owner, _ := stream.ConsumerOfDurable(name); owner == "audit" {
			out = append(out, name)
		}
	}
	return out
}

// readyzWarnings are the warnings of p's /readyz.
func readyzWarnings(t *testing.T, p *serveProc) []string {
	t.Helper()
	resp, err := http.Get(p.url + "/readyz")
	if err != nil {
		t.Fatalf("%s readyz: %v", p.name, err)
	}
	defer resp.Body.Close()
	var body struct {
		Ready    bool     `json:"ready"`
		Warnings []string `json:"warnings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || !body.Ready {
		t.Fatalf("%s readyz %d: %+v, %v: a stranding durable must not fail readiness", p.name, resp.StatusCode, body, err)
	}
	return body.Warnings
}
