package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// `status --json` and the admin API's GET /api/v1/status are one shape
// read by one function: read from one running serve with something of
// every kind to show (an applied event with its outbox row, a conflict,
// a postponed event, a dead letter, a keyed consumer's partitions and
// member), they have the same keys at every level and the same values.
// The API adds only ready, the answering instance's readiness. Ages are
// read at different moments, so they may differ by the time between the
// two reads, no more.
func TestStatusJSONIsTheAdminAPIsStatus(t *testing.T) {
	t.Parallel()
	const token = "status-agree-token-0123456789"
	db := hookbridgetest.Postgres(t, orders.Migrations())
	srv, addr, dataDir := serveWith(t, db, func(k string) (string, bool) {
		switch k {
		case "HOOKBRIDGE_ADMIN_TOKEN":
			return token, true
		case "HOOKBRIDGE_ADMIN_ADDR":
			return "127.0.0.1:0", true
		}
		return "", false
	})
	flags := []string{"--database-url", db.URL, "--data-dir", dataDir, "--http-addr", addr}
	send := func(id, typ, data string, want int) {
		t.Helper()
		code, out, errOut := runMain(t, append([]string{"send", "--id", id, "--type", typ, "--data", data}, flags...)...)
		if code != want {
			t.Fatalf("send %s: exit %d, want %d\n%s%s", id, code, want, out, errOut)
		}
	}
	send("evt-1", orders.Created, `{"order_id":"o-1","amount_cents":500,"currency":"EUR"}`, 0)
	send("evt-1", orders.Created, `{"order_id":"o-1","amount_cents":900,"currency":"EUR"}`, 1) // a conflict
	send("evt-early", orders.Paid, `{"order_id":"o-late","amount_cents":500,"currency":"EUR"}`, 0)
	err := engine.RecordDeadLetter(context.Background(), db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo", EventID: "gone",
		StreamSeq: 999, Deliveries: 10, Reason: engine.ReasonMaxDeliver, LastError: "x"})
	if err != nil {
		t.Fatal(err)
	}
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.outbox WHERE status = 'sent'`)
	db.AwaitCount(t, 1, `SELECT count(*) FROM hookbridge.delivery_failures WHERE event_id = 'evt-early' AND postponed_since IS NOT NULL`)

	api := func() map[string]any {
		t.Helper()
		code, b := adminCall(t, srv.AdminAddr(), token, http.MethodGet, "/api/v1/status", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/status: %d\n%s", code, b)
		}
		return decodeObject(t, b)
	}
	cli := func() map[string]any {
		t.Helper()
		out, err := runOps(t, append([]string{"status", "--json"}, flags...)...)
		if err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return decodeObject(t, []byte(out))
	}

	// Both read a live deployment (a member's heartbeat writes its KV
	// stream, a postponed event is tried again), so the two reads are
	// compared until one pair is taken with nothing moving in between.
	var diffs []string
	var fromCLI, fromAPI map[string]any
	deadline := time.Now().Add(time.Minute)
	for {
		start := time.Now()
		fromCLI = cli()
		fromAPI = api()
		end := time.Now()
		if ready, ok := fromAPI["ready"]; !ok || ready != true {
			t.Fatalf("the API's status has ready %v, want true", ready)
		}
		if _, ok := fromCLI["ready"]; ok {
			t.Fatalf("status --json has ready; only an instance knows its readiness")
		}
		delete(fromAPI, "ready")
		// An age the API read is older by the time between the reads: not
		// less (its read began after the command's ended), and at most
		// the time from the command's start to the API's end.
		diffs = compareJSON("", fromCLI, fromAPI, end.Sub(start).Seconds())
		if len(diffs) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(diffs) > 0 {
		t.Fatalf("status --json and GET /api/v1/status differ:\n%s", strings.Join(diffs, "\n"))
	}

	// The comparison looked at every kind of figure.
	type consumerRow struct {
		Name       string
		Partitions []any
		Members    []any
	}
	var st struct {
		Consumers             []consumerRow
		Postponed             []any
		DeadLettersUnresolved int64 `json:"dead_letters_unresolved"`
		Conflicts             int64
		Outbox                struct{ Sent int64 }
		Streams               []struct{ Name string }
	}
	b, _ := json.Marshal(fromCLI)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Consumers, func(c consumerRow) bool { return c.Name == "orders" })
	if i < 0 || len(st.Consumers[i].Partitions) == 0 || len(st.Consumers[i].Members) != 1 || len(st.Postponed) != 1 ||
		st.DeadLettersUnresolved != 1 || st.Conflicts != 1 || st.Outbox.Sent != 1 || len(st.Streams) < 2 {
		t.Fatalf("the status compared lacks a figure: %s", b)
	}
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// compareJSON lists where a and b differ, key by key: a key only one
// has, or another value. A figure whose key ends in _age_seconds may be
// larger in b, by at most maxAge (and by up to a millisecond less: JSON
// rounds them), and is 0 in both or in neither.
func compareJSON(path string, a, b any, maxAge float64) []string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		var out []string
		for k := range av {
			if _, ok := bv[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: only in status --json", path, k))
			}
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: only in the API", path, k))
				continue
			}
			if strings.HasSuffix(k, "_age_seconds") {
				x, okA := av[k].(float64)
				y, okB := bv[k].(float64)
				if !okA || !okB || (x == 0) != (y == 0) || y-x < -1e-3 || y-x > maxAge+1e-3 {
					out = append(out, fmt.Sprintf("%s.%s: %v vs %v (may grow by at most %.3f)", path, k, av[k], bv[k], maxAge))
				}
				continue
			}
			out = append(out, compareJSON(path+"."+k, av[k], bv[k], maxAge)...)
		}
		slices.Sort(out)
		return out
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		var out []string
		for i := range av {
			out = append(out, compareJSON(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i], maxAge)...)
		}
		return out
	default:
		if !reflect.DeepEqual(a, b) {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		return nil
	}
}
