package app

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// config check prints what serve runs with: every consumer setting it
// prints is the option the engine's consumer that serve builds holds
// (left out, set, and an SQL consumer's own concurrency default), and
// every relay setting the option the relay holds. The printed YAML is
// read back and compared with the options, field by field, as values.
func TestConfigCheckPrintsWhatServeRuns(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	path := writeConfig(t, `
sources:
  - {name: demo, scheme: standard-webhooks, secrets: [`+testSecret+`], ordering_key: {pointer: /data/order_id}}
  - {name: gh, scheme: github, secrets: [s]}
consumers:
  - {name: orders, handler: orders, sources: [demo]}
  - name: tuned
    handler: orders
    sources: [gh]
    concurrency: 2
    batch_size: 16
    batch_wait: 5ms
    ack_wait: 1m
    max_deliver: -1
    max_ack_pending: 500
    handler_timeout: 5s
    backoff: [1s, 3s]
    postpone_limit: 2h
  - name: tickets
    sources: [gh]
    sql: {apply: {issues: SELECT 1}}
relay: {batch_size: 64, retention: 0s}
`)
	cfg, err := Load(path, mapEnv(nil), Overrides{DatabaseURL: db.URL, NATSURL: ns.URL(), DataDir: t.TempDir()}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := cfg.Resolved(ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	out, err := EffectiveYAML(resolved)
	if err != nil {
		t.Fatal(err)
	}
	var printed Config
	dec := yaml.NewDecoder(bytes.NewReader(out))
	dec.KnownFields(true)
	if err := dec.Decode(&printed); err != nil {
		t.Fatalf("printed configuration does not read back: %v\n%s", err, out)
	}

	srv, err := NewServer(cfg, ordersHandlers(), nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv.pool, srv.js = db.Pool, ns.JS
	consumers, err := srv.consumers()
	if err != nil {
		t.Fatal(err)
	}
	if len(consumers) != 3 || len(printed.Consumers) != 3 {
		t.Fatalf("%d consumers, %d printed; want 3", len(consumers), len(printed.Consumers))
	}
	for i, c := range consumers {
		running := c.Options()
		n := sameFields(t, "consumers["+running.Name+"]", printed.Consumers[i], running)
		if n < 12 { // name, sources, event types and the 9 settings
			t.Fatalf("compared %d fields of consumer %s; the settings' names changed?", n, running.Name)
		}
	}
	// Each consumer's values differ from the others': left out, set, the
	// SQL consumer's concurrency of one.
	if got := []int{printed.Consumers[0].Concurrency, printed.Consumers[1].Concurrency, printed.Consumers[2].Concurrency}; !slices.Equal(got, []int{engine.DefaultConcurrency, 2, 1}) {
		t.Fatalf("printed concurrency %v", got)
	}

	r := srv.newRelay().Options()
	p := printed.Relay
	if p.BatchSize != r.BatchSize || p.PollInterval != r.PollInterval || p.MaxAttempts != r.MaxAttempts ||
		p.Retention == nil || *p.Retention != 0 || !r.DeleteSent || p.BatchSize != 64 {
		t.Fatalf("printed relay %+v (retention %v), the relay runs with %+v", p, p.Retention, r)
	}
}

// sameFields compares each field of printed (a configuration struct) with
// the field of the same name and type of running (the options a part runs
// with) and returns how many it compared.
func sameFields(t *testing.T, what string, printed, running any) int {
	t.Helper()
	pv, rv := reflect.ValueOf(printed), reflect.ValueOf(running)
	n := 0
	for i := range pv.NumField() {
		f := pv.Type().Field(i)
		r := rv.FieldByName(f.Name)
		if !f.IsExported() || !r.IsValid() || r.Type() != f.Type {
			continue
		}
		n++
		if !reflect.DeepEqual(pv.Field(i).Interface(), r.Interface()) {
			t.Errorf("%s.%s: printed %v, runs with %v", what, f.Name, pv.Field(i).Interface(), r.Interface())
		}
	}
	return n
}
