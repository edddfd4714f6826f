package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/metrics"
)

// exported returns every series name hookbridge's metrics registry
// serves: the registry as serve builds it, with each recorder used once
// (a labelled counter or histogram has no series until then) and the
// scrape-time collectors answering, the way app registers them.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	reg := metrics.New()
	reg.IngressRequest("demo", 401, "mismatch")
	reg.IngressPublish(string(bridge.PublishStored), time.Millisecond)
	reg.ConsumerBatch("orders", 1, time.Millisecond)
	var outcomes []string
	for _, o := range engine.MessageOutcomes() {
		outcomes = append(outcomes, o.String())
	}
	reg.InitConsumer("orders", outcomes)
	reg.RelayBatch(1, 1, time.Millisecond)
	reg.StreamState("HOOKS", 1, -1, false)
	reg.HooksTrimmed(1)
	reg.OrphanedDurables([]string{"gone"})
	consumers := metrics.NewConsumerCollector([]string{"orders"}, func(context.Context, string) (metrics.ConsumerState, error) {
		return metrics.ConsumerState{Pending: 1, Keyed: true, Partitions: []metrics.PartitionState{{Partition: 0, Pending: 1}},
			Members: []metrics.MemberState{{ID: "m1", Host: "h", Partitions: 1, Backlog: 1}}}, nil
	}, 0)
	database := metrics.NewDatabaseCollector(func(context.Context) (metrics.DatabaseState, error) {
		return metrics.DatabaseState{DeadLetters: map[string]int64{"orders": 1}}, nil
	}, 0)
	if err := reg.Register(consumers); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(database); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		n := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n], names[n+"_sum"], names[n+"_count"] = true, true, true
		default:
			names[n] = true
		}
	}
	if !names["hookbridge_consumer_pending_messages"] || !names["hookbridge_outbox_dead_rows"] || !names["hookbridge_relay_publish_seconds_bucket"] {
		t.Fatalf("the registry did not serve its collectors: %v", keys(names))
	}
	return names
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// check parses expr and returns its metric names, failing if it does not
// parse, is not of an allowed type, or names a series hookbridge does not
// export.
func check(expr string, known map[string]bool, allowed ...valueType) ([]string, error) {
	names, typ, err := parsePromQL(expr)
	if err != nil {
		return nil, fmt.Errorf("does not parse: %w", err)
	}
	if !slices.Contains(allowed, typ) {
		return nil, fmt.Errorf("is %s, want one of %v", typ, allowed)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("selects no metric")
	}
	for _, n := range names {
		if !known[n] {
			return nil, fmt.Errorf("names %s, which hookbridge does not export", n)
		}
	}
	return names, nil
}

type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// templateFuncs are Prometheus's alert template functions, for parsing
// the annotations (they are not run).
var templateFuncs = template.FuncMap{}

func init() {
	for _, n := range strings.Fields(`humanize humanize1024 humanizeDuration humanizePercentage humanizeTimestamp
		title toUpper toLower query first label value sortByLabel strvalue args reReplaceAll match graphLink
		tableLink safeHtml stripPort stripDomain pathPrefix externalURL parseDuration toTime urlQueryEscape`) {
		templateFuncs[n] = func(...any) any { return nil }
	}
}

// TestAlertRules: every rule of deploy/prometheus/alerts.yml has a name,
// a severity, a summary that parses as a Prometheus template and an
// expression that parses as an instant vector naming only exported
// series; together they cover consumer lag, dead letters, the outbox's
// oldest pending age, ingress 5xx answers and relay failures.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	known := exported(t)
	raw, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true) // a misspelt key (exp:, annotation:) fails
	var rules alertRules
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	seen := map[string]bool{}
	used := map[string]string{} // metric or metric{matcher} -> alert
	n := 0
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a group needs a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("rule %q: missing or repeated alert name", r.Alert)
			}
			seen[r.Alert] = true
			if r.For != "" && !durationRE.MatchString(r.For) {
				t.Errorf("%s: for %q is not a duration", r.Alert, r.For)
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", r.Alert)
			}
			for k, v := range r.Annotations {
				// Prometheus defines these variables in front of every template.
				src := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}" + v
				if _, err := template.New(k).Funcs(templateFuncs).Parse(src); err != nil {
					t.Errorf("%s: annotation %s: %v", r.Alert, k, err)
				}
			}
			names, err := check(r.Expr, known, tyVector)
			if err != nil {
				t.Errorf("%s: expression %s\n%s", r.Alert, err, r.Expr)
				continue
			}
			for _, m := range names {
				used[m] = r.Alert
			}
			// The self-test dead-letters an event and meets a conflict on
			// purpose at every run: those are not the operator's.
			if strings.Contains(r.Expr, "hookbridge_consumer_events_total") && !strings.Contains(r.Expr, `consumer!="hookbridge_selftest"`) {
				t.Errorf("%s: counts the self-test's consumer too; add consumer!=\"hookbridge_selftest\"", r.Alert)
			}
			if strings.Contains(r.Expr, `outcome="dead_lettered"`) {
				used["dead_lettered"] = r.Alert
			}
			if strings.Contains(r.Expr, `status=~"5..`) {
				used["5xx"] = r.Alert
			}
			if strings.Contains(r.Expr, `result="failed"`) {
				used["relay failed"] = r.Alert
			}
		}
	}
	t.Logf("%d alert rules checked", n)
	for _, need := range []string{
		"hookbridge_consumer_pending_messages",           // consumer lag
		"hookbridge_consumer_oldest_unacked_age_seconds", // ... and how old it is
		"dead_lettered", // dead letters rising
		"hookbridge_outbox_oldest_pending_age_seconds", // outbox oldest pending age
		"5xx",          // ingress 5xx
		"relay failed", // relay failures
		"hookbridge_stream_hooks_orphaned_durables", // a durable that pins HOOKS
		"hookbridge_stream_max_bytes",               // HOOKS filling with unapplied messages
		"hookbridge_consumer_partition_pinned",      // a keyed partition nobody applies
	} {
		if used[need] == "" {
			t.Errorf("no alert covers %s", need)
		}
	}
}

// grafanaVars are Grafana's built-in interval variables; a dashboard
// variable such as $consumer only ever appears inside a matcher's string.
var grafanaVars = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)

var labelValues = regexp.MustCompile(`^label_values\(\s*([^,()]+?)\s*,\s*[a-zA-Z_]\w*\s*\)$`)

// TestGrafanaDashboard: deploy/grafana/hookbridge.json is a dashboard
// whose panels all query through the ${datasource} variable with
// expressions that parse and name only exported series, whose variables
// ask for exported series, and which shows every hookbridge_* series.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	known := exported(t)
	raw, err := os.ReadFile("grafana/hookbridge.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title         string            `json:"title"`
		UID           string            `json:"uid"`
		SchemaVersion int               `json:"schemaVersion"`
		Panels        []json.RawMessage `json:"panels"`
		Templating    struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("hookbridge.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || dash.SchemaVersion == 0 {
		t.Errorf("title %q, uid %q, schemaVersion %d: all three are needed for an import", dash.Title, dash.UID, dash.SchemaVersion)
	}
	shown := map[string]bool{}
	hasDatasourceVar := false
	for _, v := range dash.Templating.List {
		switch v.Type {
		case "datasource":
			hasDatasourceVar = v.Name == "datasource" || hasDatasourceVar
		case "query":
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				if err := json.Unmarshal(v.Query, &q.Query); err != nil {
					t.Errorf("variable %s: query %s", v.Name, v.Query)
					continue
				}
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
				continue
			}
			if _, err := check(m[1], known, tyVector); err != nil {
				t.Errorf("variable %s: %s %v", v.Name, m[1], err)
			}
		}
	}
	if !hasDatasourceVar {
		t.Error("no datasource variable: panels must not hard-code a data source")
	}

	type panel struct {
		ID         int                       `json:"id"`
		Type       string                    `json:"type"`
		Title      string                    `json:"title"`
		Datasource *struct{ UID string }     `json:"datasource"`
		GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
		Targets    []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	ids := map[int]bool{}
	queries := 0
	var walk func([]json.RawMessage)
	walk = func(raws []json.RawMessage) {
		for _, r := range raws {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Errorf("panel: %v", err)
				continue
			}
			if p.ID == 0 || ids[p.ID] {
				t.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %d: needs a title and a gridPos inside 24 columns", p.ID)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource must be ${datasource}", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no queries", p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				expr := grafanaVars.ReplaceAllString(tg.Expr, "5m")
				names, err := check(expr, known, tyVector, tyScalar)
				if err != nil {
					t.Errorf("panel %q query %s: %v\n%s", p.Title, tg.RefID, err, tg.Expr)
					continue
				}
				for _, n := range names {
					shown[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
				}
			}
		}
	}
	walk(dash.Panels)
	t.Logf("%d panels, %d queries checked", len(ids), queries)
	for _, n := range keys(known) {
		if !strings.HasPrefix(n, "hookbridge_") {
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if !shown[base] && !shown[n] {
			t.Errorf("the dashboard shows no panel of %s", n)
		}
	}
}

// TestPromQLChecker: the checker the two tests above rely on accepts the
// PromQL forms the files use (and more), reports the metrics selected,
// and rejects the mistakes it exists to catch.
func TestPromQLChecker(t *testing.T) {
	t.Parallel()
	good := map[string][]string{
		`sum by (consumer) (rate(a_total{x="1",y=~"a|b",}[5m]))`:                 {"a_total"},
		`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m]))) > 0.5`:       {"h_bucket"},
		`max_over_time(rate(c[5m])[1h:1m]) offset 1d`:                            {"c"},
		`a / on (job) group_left (instance) b`:                                   {"a", "b"},
		`a > bool 0 unless b or c and d`:                                         {"a", "b", "c", "d"},
		`-a ^ 2 ^ 3 + 1e3 * 0x1f - .5 % Inf`:                                     {"a"},
		`label_replace(job:a:rate5m, "dst", "$1", "src", "(.*)")`:                {"job:a:rate5m"},
		`sum without (instance) (a) / ignoring (x) count_values("v", b)`:         {"a", "b"},
		`topk(3, a @ 1700000000) or bottomk(1, b @ end())`:                       {"a", "b"},
		`{__name__="a", job!=""}`:                                                {"a"},
		`absent(a{status=~"5.."}) == bool 1`:                                     {"a"},
		`sum(increase(a[15m])) by (consumer) > 0  # trailing comment`:            {"a"},
		`clamp_min(a, 0) and on () vector(1)`:                                    {"a"},
		`round(a) + round(a, 0.1) + time() - scalar(b)`:                          {"a", "a", "b"},
		`quantile_over_time(0.9, a[10m]) - predict_linear(b[1h], 3600) < bool 3`: {"a", "b"},
	}
	for expr, want := range good {
		got, _, err := parsePromQL(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: metrics %v, want %v", expr, got, want)
		}
	}
	bad := []string{
		`rate(a)`,                    // rate of an instant vector
		`sum(rate(a[5m])`,            // unbalanced
		`sum by (consumer (a)`,       // unbalanced label list
		`histogram_quantil(0.9, a)`,  // misspelt function
		`a[5]`,                       // a range without a unit
		`a{x="1"`,                    // unterminated selector
		`a{x~"1"}`,                   // not a matcher operator
		`a{x=~"("}`,                  // bad regexp
		`a[5m] + 1`,                  // arithmetic on a range vector
		`1 > 2`,                      // scalar comparison without bool
		`a and 1`,                    // set operator on a scalar
		`rate(sum(a)[5m])`,           // a range after a non-selector
		`a offset`,                   // offset without a duration
		`{}`,                         // a selector matching everything
		`{x=""}`,                     // ... still everything
		`a +`,                        // missing operand
		`topk(a)`,                    // missing parameter
		`sum(a) by (x) by (y)`,       // two groupings
		`histogram_quantile(a, 0.9)`, // arguments swapped
		`a $b`,                       // stray template variable
		`a{x="1"} b`,                 // two expressions
		`a + bool b`,                 // bool on arithmetic
		`"text"`,                     // not a vector (checked by type in check)
	}
	known := map[string]bool{"a": true, "b": true}
	for _, expr := range bad {
		if _, err := check(expr, known, tyVector, tyScalar); err == nil {
			t.Errorf("%s: accepted, want an error", expr)
		}
	}
	if _, err := check(`sum(rate(hookbridge_no_such_total[5m]))`, exported(t), tyVector); err == nil ||
		!strings.Contains(err.Error(), "hookbridge_no_such_total") {
		t.Errorf("an unknown metric was not reported: %v", err)
	}
}
