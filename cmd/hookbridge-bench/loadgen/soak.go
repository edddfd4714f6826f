package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
)

// SoakOptions configure [Soak]: a steady rate for a long time through
// `hookbridge serve` (own process, default configuration) against a
// nats-server (own process), sampling both processes' RSS, to show where
// memory settles.
type SoakOptions struct {
	// Exe and NATSExe are as in [ExternalOptions].
	Exe      string
	NATSExe  string
	AdminURL string
	Duration time.Duration // default 5 minutes
	Rate     float64       // events per second, default 1000
	// Concurrency is the senders' connections (default 32).
	Concurrency int
	// Sample is the RSS sampling interval (default 5s).
	Sample time.Duration
	// PaidEvery and PaidFirst are Options'.
	PaidEvery int
	PaidFirst bool
	Progress  io.Writer
}

// SoakSample is both processes' RSS at one moment.
type SoakSample struct {
	AtSeconds  float64 `json:"at_s"`
	ServeRSSKB int64   `json:"hookbridge_rss_kb"`
	NATSRSSKB  int64   `json:"nats_rss_kb"`
}

// SoakResult is the RSS curve of a soak and the load's own figures.
type SoakResult struct {
	Rate            float64      `json:"rate"`
	DurationSeconds float64      `json:"duration_s"`
	Samples         []SoakSample `json:"samples"`
	// Growth in MiB per minute over the first and the last quarter of the
	// run, per process, and whether each levelled off: the last quarter
	// grew by at most 1 MiB/min or a fifth of the first quarter's rate.
	ServeGrowthFirst float64 `json:"hookbridge_growth_first_quarter_mib_per_min"`
	ServeGrowthLast  float64 `json:"hookbridge_growth_last_quarter_mib_per_min"`
	NATSGrowthFirst  float64 `json:"nats_growth_first_quarter_mib_per_min"`
	NATSGrowthLast   float64 `json:"nats_growth_last_quarter_mib_per_min"`
	ServeLevelled    bool    `json:"hookbridge_levelled"`
	NATSLevelled     bool    `json:"nats_levelled"`
	Load             *Result `json:"load"`
}

// Soak runs o.Rate events per second for o.Duration and samples the RSS
// of serve and of nats-server every o.Sample.
func Soak(ctx context.Context, o SoakOptions) (*SoakResult, error) {
	if o.Exe == "" || o.NATSExe == "" {
		return nil, errors.New("loadgen: soak: no hookbridge or hookbridge-bench binary")
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Minute
	}
	if o.Rate <= 0 {
		o.Rate = 1000
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Sample <= 0 {
		o.Sample = 5 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	x := &external{o: ExternalOptions{Exe: o.Exe, NATSExe: o.NATSExe, AdminURL: o.AdminURL}}
	e, err := x.startEnv(ctx, true)
	if err != nil {
		return nil, err
	}
	defer e.close() //nolint:errcheck // best effort
	if err := e.startServe(ctx, o.Exe); err != nil {
		return nil, err
	}
	res := &SoakResult{Rate: o.Rate, DurationSeconds: o.Duration.Seconds()}
	start := time.Now()
	sample := func() {
		s := SoakSample{AtSeconds: time.Since(start).Seconds(), ServeRSSKB: e.serve.RSSKB(), NATSRSSKB: e.nats.RSSKB()}
		res.Samples = append(res.Samples, s)
		fmt.Fprintf(o.Progress, "soak %4.0fs: hookbridge %4d MiB, nats-server %4d MiB\n", s.AtSeconds, s.ServeRSSKB/1024, s.NATSRSSKB/1024)
	}
	sample()
	nc, err := nats.Connect(e.natsURL, nats.Name("hookbridge-bench"))
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	done := make(chan struct{})
	var load *Result
	var loadErr error
	go func() {
		defer close(done)
		// With the relayed events measured, the run also counts the WAL
		// written until every one of them is recorded.
		load, loadErr = Load(ctx, Options{URL: e.serve.URL, Secret: e.serve.Secret, DatabaseURL: e.db.URL, Check: true,
			Concurrency: o.Concurrency, Total: int(o.Rate * o.Duration.Seconds()), Rate: o.Rate, PaidEvery: o.PaidEvery,
			PaidFirst: o.PaidFirst, Events: NATSEvents(nc)})
	}()
	t := time.NewTicker(o.Sample)
	defer t.Stop()
loop:
	for {
		select {
		case <-t.C:
			sample()
		case <-done:
			break loop
		}
	}
	sample()
	res.Load = load
	res.levels()
	if loadErr != nil {
		return res, loadErr
	}
	if load.Check == nil || !load.Check.OK {
		return res, fmt.Errorf("soak: count check failed: %s", load.Check)
	}
	return res, nil
}

// levels computes the growth of the first and last quarter of the
// sending time.
func (r *SoakResult) levels() {
	growth := func(rss func(SoakSample) int64, from, to float64) float64 {
		var a, b *SoakSample
		for i := range r.Samples {
			s := &r.Samples[i]
			if a == nil && s.AtSeconds >= from {
				a = s
			}
			if s.AtSeconds <= to {
				b = s
			}
		}
		if a == nil || b == nil || b.AtSeconds <= a.AtSeconds {
			return 0
		}
		return float64(rss(*b)-rss(*a)) / 1024 / ((b.AtSeconds - a.AtSeconds) / 60)
	}
	q := r.DurationSeconds / 4
	serve := func(s SoakSample) int64 { return s.ServeRSSKB }
	ns := func(s SoakSample) int64 { return s.NATSRSSKB }
	r.ServeGrowthFirst, r.ServeGrowthLast = growth(serve, 0, q), growth(serve, 3*q, 4*q)
	r.NATSGrowthFirst, r.NATSGrowthLast = growth(ns, 0, q), growth(ns, 3*q, 4*q)
	levelled := func(first, last float64) bool { return last <= max(1, first/5) }
	r.ServeLevelled = levelled(r.ServeGrowthFirst, r.ServeGrowthLast)
	r.NATSLevelled = levelled(r.NATSGrowthFirst, r.NATSGrowthLast)
}

// Print writes the curve (at most about 30 rows) and the verdict.
func (r *SoakResult) Print(w io.Writer) {
	fmt.Fprintf(w, "soak: %.0f events/s for %s through hookbridge serve (own process, default configuration) and nats-server (own process)\n\n",
		r.Rate, time.Duration(r.DurationSeconds*float64(time.Second)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "time\thookbridge RSS MiB\tnats-server RSS MiB\t")
	step := max(1, len(r.Samples)/30)
	for i, s := range r.Samples {
		if i%step != 0 && i != len(r.Samples)-1 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", time.Duration(s.AtSeconds*float64(time.Second)).Round(time.Second), s.ServeRSSKB/1024, s.NATSRSSKB/1024)
	}
	tw.Flush()
	verdict := map[bool]string{true: "levelled off", false: "STILL GROWING"}
	fmt.Fprintf(w, "\nhookbridge: %+.1f MiB/min in the first quarter, %+.1f in the last: %s\n", r.ServeGrowthFirst, r.ServeGrowthLast, verdict[r.ServeLevelled])
	fmt.Fprintf(w, "nats-server: %+.1f MiB/min in the first quarter, %+.1f in the last: %s\n", r.NATSGrowthFirst, r.NATSGrowthLast, verdict[r.NATSLevelled])
	if r.Load != nil {
		fmt.Fprintln(w)
		r.Load.Print(w)
	}
}
