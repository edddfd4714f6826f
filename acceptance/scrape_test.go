package acceptance

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// scrape is one parsed answer of a /metrics endpoint.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics GETs url and parses the text exposition format.
func scrapeMetrics(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: %s\n%s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return fams
}

// value is the value of the series of name with exactly these labels: a
// counter's or gauge's value, a histogram's sample count (name without
// _count), or -1 when there is no such series.
func (s scrape) value(name string, labels ...string) float64 {
	m := s.series(name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// sum is a histogram series' sample sum (-1 when there is none).
func (s scrape) sum(name string, labels ...string) float64 {
	m := s.series(name, labels...)
	if m == nil || m.Histogram == nil {
		return -1
	}
	return m.Histogram.GetSampleSum()
}

func (s scrape) series(name string, labels ...string) *dto.Metric {
	fam := s[name]
	if fam == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fam.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// dump lists the hookbridge series, for failure messages.
func (s scrape) dump() string {
	var out []string
	for name, fam := range s {
		if !strings.HasPrefix(name, "hookbridge_") {
			continue
		}
		for _, m := range fam.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Histogram != nil:
				v = float64(m.Histogram.GetSampleCount())
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", name, strings.Join(ls, ","), v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// servedApp is an app.Server running the demo configuration against the
// test's NATS and database.
type servedApp struct {
	srv  *app.Server
	addr string
	cfg  app.Config
}

// serveApp runs app.Server with every role until the test ends.
func serveApp(t *testing.T, js *hookbridgetest.JetStream, db *hookbridgetest.Database, configure func(*app.Server)) *servedApp {
	t.Helper()
	env := func(k string) (string, bool) {
		if k == "HOOKBRIDGE_DEMO_SECRET" {
			return secret, true
		}
		return "", false
	}
	cfg := app.Config{HTTPAddr: "127.0.0.1:0", DatabaseURL: db.URL, NATSURL: js.URL(), DataDir: t.TempDir()}
	cfg.ApplyEnv(env)
	cfg.Sources = app.DefaultSources(env)
	cfg.Consumers = app.DefaultConsumers()
	cfg.Relay.PollInterval = 200 * time.Millisecond
	if err := cfg.Complete(env, builtin.Handlers()); err != nil {
		t.Fatal(err)
	}
	srv, err := app.NewServer(cfg, builtin.Handlers(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(addr string) { addrCh <- addr }) }()
	var addr string
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("serve did not stop")
		}
	})
	hookbridgetest.Eventually(t, time.Minute, "readyz", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return &servedApp{srv: srv, addr: addr, cfg: cfg}
}
