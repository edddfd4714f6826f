package loadgen

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"
)

// Suite stages.
const (
	StagePublish  = "publish"  // raw JetStream publish, sync and async
	StageHTTP     = "http"     // the HTTP→publish floor and hookbridge's ingress
	StagePostgres = "postgres" // raw single-row insert commits
	StageDrain    = "drain"    // consumer apply throughput per batch size
	StageE2E      = "e2e"      // pipeline maximum, then end-to-end latency at half of it
)

// AllStages is every stage in the order a round runs them.
var AllStages = []string{StagePublish, StageHTTP, StagePostgres, StageDrain, StageE2E}

// SuiteOptions configure [RunSuite]; zero values take the defaults noted.
type SuiteOptions struct {
	Factory  EnvFactory
	AdminURL string // Postgres server for the raw insert database
	Stages   []string
	// Repeat is the number of rounds (default 3); every figure is the
	// median of its rounds, every ratio the median of per-round ratios.
	Repeat int
	// Concurrency is requests in flight for the HTTP stages and sync
	// publishers for the raw publish (default 32).
	Concurrency int
	Total       int // events per HTTP and publish run (default 20000)
	AsyncWindow int // outstanding async publishes (default 4096)
	// PGConcurrency is the connections of the raw insert (default: the
	// consumer concurrency, so both use as many connections).
	PGConcurrency int
	PGTotal       int // rows per raw insert run (default 10000)
	DrainTotal    int // events per drain (default 20000)
	// Consumer is the consumer's concurrency and batch wait in every
	// stage; Batches the batch sizes the drain compares (default 1, 32,
	// 64; the first is the baseline) and E2EBatch the one of the e2e stage
	// (default 32).
	Consumer ConsumerSettings
	Batches  []int
	E2EBatch int
	E2ETotal int // events of the half-rate run (default 20000)
	// PollInterval is the inbox poll of the e2e stage (default 2ms).
	PollInterval time.Duration
	// QuietBelow, when > 0, makes every step wait (up to QuietMaxWait,
	// default 10m) until the machine's CPUs are less than this fraction
	// busy, so a shared machine's other work does not land in one side of
	// a comparison. The busy fraction seen is recorded either way.
	QuietBelow   float64
	QuietMaxWait time.Duration
	Progress     io.Writer
}

func (o *SuiteOptions) setDefaults() {
	if len(o.Stages) == 0 {
		o.Stages = AllStages
	}
	if o.Repeat <= 0 {
		o.Repeat = 3
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Total <= 0 {
		o.Total = 20000
	}
	if o.AsyncWindow <= 0 {
		o.AsyncWindow = 4096
	}
	if o.Consumer.Concurrency <= 0 {
		o.Consumer.Concurrency = 4
	}
	if o.PGConcurrency <= 0 {
		o.PGConcurrency = o.Consumer.Concurrency
	}
	if o.PGTotal <= 0 {
		o.PGTotal = 10000
	}
	if o.DrainTotal <= 0 {
		o.DrainTotal = 20000
	}
	if len(o.Batches) == 0 {
		o.Batches = []int{1, 32, 64}
	}
	if o.E2EBatch <= 0 {
		o.E2EBatch = 32
	}
	if o.E2ETotal <= 0 {
		o.E2ETotal = 20000
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Millisecond
	}
	if o.QuietMaxWait <= 0 {
		o.QuietMaxWait = 10 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Measurement is one figure over the rounds.
type Measurement struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
}

// Ratio compares two measurements round by round.
type Ratio struct {
	Name     string    `json:"name"`
	Of       string    `json:"of"`
	To       string    `json:"to"`
	PerRound []float64 `json:"per_round"`
	Median   float64   `json:"median"`
	Target   string    `json:"target,omitempty"`
	Met      *bool     `json:"met,omitempty"`
}

// Machine describes where the suite ran.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	MemoryMiB int64  `json:"memory_mib,omitempty"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
}

// SuiteResult is everything a suite measured.
type SuiteResult struct {
	Machine      Machine        `json:"machine"`
	Options      map[string]any `json:"options"`
	Measurements []*Measurement `json:"measurements"`
	Ratios       []*Ratio       `json:"ratios"`
	Targets      []Target       `json:"targets"`
	// Failures lists count checks that failed and runs with errors.
	Failures []string `json:"failures,omitempty"`
	// Background is the machine's CPU busy fraction (all processes) seen
	// right before each step, while this process was idle.
	Background []float64 `json:"background_busy"`
	Runs       []any     `json:"runs"`
}

// Target is one goal of docs/PERFORMANCE.md and whether the medians meet it.
type Target struct {
	Name  string  `json:"name"`
	Goal  string  `json:"goal"`
	Value float64 `json:"value"`
	Met   bool    `json:"met"`
}

type suite struct {
	o   SuiteOptions
	res *SuiteResult
	by  map[string]*Measurement
}

// addThroughput prints a raw throughput run under label and keeps it
// with the runs.
func (s *suite) addThroughput(label string, t Throughput) {
	fmt.Fprintln(s.o.Progress, label+":", t)
	s.res.Runs = append(s.res.Runs, t)
}

func (s *suite) record(name, unit string, v float64) {
	m := s.by[name]
	if m == nil {
		m = &Measurement{Name: name, Unit: unit}
		s.by[name] = m
		s.res.Measurements = append(s.res.Measurements, m)
	}
	m.Values = append(m.Values, v)
}

func (s *suite) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.res.Failures = append(s.res.Failures, msg)
	fmt.Fprintln(s.o.Progress, "suite: FAILURE:", msg)
}

// Names of the suite's measurements, used for ratios and targets.
const (
	mPubSync         = "jetstream publish sync"
	mPubAsync        = "jetstream publish async"
	mFloor           = "floor HTTP→publish"
	mIngress         = "hookbridge ingress (verify on)"
	mPGInsert        = "postgres single-row insert"
	mPGInsert1       = "postgres single-row insert, 1 connection"
	mPipeline        = "pipeline max sustainable"
	mE2EP50          = "e2e p50 @ 50% of max"
	mE2EP95          = "e2e p95 @ 50% of max"
	mE2EP99          = "e2e p99 @ 50% of max"
	mE2ERate         = "e2e run rate (50% of max)"
	mIngressP99      = "hookbridge ingress p99"
	mFloorP99        = "floor p99"
	mPipelineIngress = "pipeline max: ingress rate"
	mE2EBusy         = "machine busy during the 50% run"
	mE2ERelayP99     = "e2e p99 to relayed event @ 50%"
	mRSSStart        = "RSS start (e2e run)"
	mRSSPeak         = "RSS peak (e2e run)"
	mRSSEnd          = "RSS end (e2e run)"
	mPubSyncCPU      = "jetstream publish sync CPU"
	mFloorCPU        = "floor CPU"
	mIngressCPU      = "hookbridge ingress CPU"
)

func drainName(batch int) string { return fmt.Sprintf("consumer drain batch=%d", batch) }

// RunSuite runs the stages Repeat times, alternating their order from
// round to round so slow drift of the machine does not favour one side
// of a ratio, and returns the medians, the per-round ratios and the
// targets of docs/PERFORMANCE.md.
func RunSuite(ctx context.Context, o SuiteOptions) (*SuiteResult, error) {
	o.setDefaults()
	s := &suite{o: o, by: map[string]*Measurement{}, res: &SuiteResult{Machine: DescribeMachine(), Options: map[string]any{
		"stages": o.Stages, "repeat": o.Repeat, "concurrency": o.Concurrency, "total": o.Total, "async_window": o.AsyncWindow,
		"pg_concurrency": o.PGConcurrency, "pg_total": o.PGTotal, "drain_total": o.DrainTotal, "consumer_concurrency": o.Consumer.Concurrency,
		"batch_wait": o.Consumer.BatchWait.String(), "batches": o.Batches, "e2e_batch": o.E2EBatch, "e2e_total": o.E2ETotal,
		"poll_interval": o.PollInterval.String(), "quiet_below": o.QuietBelow,
	}}}
	var steps []func(ctx context.Context) error
	for _, st := range o.Stages {
		switch st {
		case StagePublish:
			steps = append(steps, s.publishSync, s.publishAsync)
		case StageHTTP:
			steps = append(steps, s.floor, s.ingress)
		case StagePostgres:
			steps = append(steps, s.pgInsert)
		case StageDrain:
			for _, b := range o.Batches {
				steps = append(steps, func(ctx context.Context) error { return s.drain(ctx, b) })
			}
		case StageE2E:
			steps = append(steps, s.e2e)
		default:
			return nil, fmt.Errorf("suite: unknown stage %q (have %s)", st, strings.Join(AllStages, ", "))
		}
	}
	if err := s.runRounds(ctx, "suite", o.Repeat, steps, s.quiet); err != nil {
		return nil, err
	}
	s.ratios()
	return s.res, nil
}

// runRounds runs steps rounds times, every other round in reverse order so
// that no step always runs on a machine warmed (or tired) by the one
// before. Before each step it records how busy the machine is (busy); a
// step's failure is noted and the rounds go on, unless ctx is done. At the
// end each measurement gets its median.
func (s *suite) runRounds(ctx context.Context, label string, rounds int, steps []func(context.Context) error, busy func(context.Context) (float64, error)) error {
	for round := range rounds {
		fmt.Fprintf(s.o.Progress, "%s: round %d of %d\n", label, round+1, rounds)
		order := slices.Clone(steps)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, step := range order {
			b, err := busy(ctx)
			if err != nil {
				return err
			}
			s.res.Background = append(s.res.Background, b)
			stepCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
			err = step(stepCtx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.fail("round %d: %v", round+1, err)
			}
		}
	}
	for _, m := range s.res.Measurements {
		m.Median = Median(m.Values)
	}
	return nil
}

// quiet waits for a quiet machine (when asked to) and returns how busy it
// was, sampled over a second.
func (s *suite) quiet(ctx context.Context) (float64, error) {
	if s.o.QuietBelow <= 0 {
		return MachineBusy(ctx, time.Second)
	}
	busy, err := WaitQuiet(ctx, s.o.QuietBelow, s.o.QuietMaxWait)
	if err == nil && busy >= s.o.QuietBelow {
		fmt.Fprintf(s.o.Progress, "suite: machine still %.0f%% busy after %s; measuring anyway\n", 100*busy, s.o.QuietMaxWait)
	}
	return busy, err
}

func (s *suite) publishSync(ctx context.Context) error {
	t, err := RawPublishSync(ctx, s.o.Total, s.o.Concurrency)
	if err != nil {
		return fmt.Errorf("publish sync: %w", err)
	}
	s.addThroughput("suite", t)
	s.record(mPubSync, "msgs/s", t.PerSecond)
	s.record(mPubSyncCPU, "µs/msg", t.CPUPerOpUs)
	return nil
}

func (s *suite) publishAsync(ctx context.Context) error {
	t, err := RawPublishAsync(ctx, s.o.Total, s.o.AsyncWindow)
	if err != nil {
		return fmt.Errorf("publish async: %w", err)
	}
	s.addThroughput("suite", t)
	s.record(mPubAsync, "msgs/s", t.PerSecond)
	return nil
}

func (s *suite) floor(ctx context.Context) error {
	f, err := StartFloor(ctx)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	defer f.Close() //nolint:errcheck // best effort
	r, err := Load(ctx, Options{URL: f.URL, Secret: suiteSecret, Concurrency: s.o.Concurrency, Total: s.o.Total})
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	r.Name = mFloor
	return s.httpResult(r, mFloor, mFloorP99, mFloorCPU)
}

// suiteSecret signs requests to the floor, which does not verify them.
const suiteSecret = "whsec_c3VpdGUtc2VjcmV0LXN1aXRlLXNlY3JldA=="

func (s *suite) ingress(ctx context.Context) error {
	r, err := InProcess(ctx, s.o.Factory, s.o.Consumer, []string{"ingress"}, Options{Concurrency: s.o.Concurrency, Total: s.o.Total})
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	r.Name = mIngress
	return s.httpResult(r, mIngress, mIngressP99, mIngressCPU)
}

func (s *suite) httpResult(r *Result, name, p99, cpu string) error {
	fmt.Fprintf(s.o.Progress, "suite: %s: %.0f req/s, %s\n", name, r.IngressRPS, r.Ingress)
	s.res.Runs = append(s.res.Runs, r)
	if r.Failed > 0 {
		return fmt.Errorf("%s: %d requests failed (%v)", name, r.Failed, r.Statuses)
	}
	s.record(name, "req/s", r.IngressRPS)
	s.record(p99, "ms", r.Ingress.P99Ms)
	s.record(cpu, "µs/req", r.CPUPerRequestUs)
	return nil
}

func (s *suite) pgInsert(ctx context.Context) error {
	t, err := RawInsert(ctx, s.o.AdminURL, s.o.PGTotal, s.o.PGConcurrency)
	if err != nil {
		return fmt.Errorf("postgres insert: %w", err)
	}
	s.addThroughput("suite", t)
	s.record(mPGInsert, "rows/s", t.PerSecond)
	// One connection: the commit latency itself (1 / rate).
	t1, err := RawInsert(ctx, s.o.AdminURL, max(s.o.PGTotal/4, 1), 1)
	if err != nil {
		return fmt.Errorf("postgres insert: %w", err)
	}
	s.addThroughput("suite", t1)
	s.record(mPGInsert1, "rows/s", t1.PerSecond)
	return nil
}

func (s *suite) drain(ctx context.Context, batch int) error {
	c := s.o.Consumer
	c.BatchSize = batch
	d, err := Drain(ctx, s.o.Factory, c, s.o.DrainTotal, s.o.Concurrency, s.o.Progress)
	if err != nil {
		return fmt.Errorf("drain batch=%d: %w", batch, err)
	}
	fmt.Fprintln(s.o.Progress, "suite:", d)
	s.res.Runs = append(s.res.Runs, d)
	if !d.Check.OK {
		return fmt.Errorf("drain batch=%d: count check failed: %s", batch, d.Check)
	}
	s.record(drainName(batch), "events/s", d.PerSecond)
	s.record(drainName(batch)+" CPU here", "µs/event", d.ProcessCPUPerEventUs)
	s.record(drainName(batch)+" CPU in Postgres", "µs/event", d.PostgresCPUPerEventUs)
	if d.Redelivered > 0 {
		return fmt.Errorf("drain batch=%d: %d messages redelivered", batch, d.Redelivered)
	}
	return nil
}

// e2e finds the pipeline's maximum (all roles, closed loop, until every
// event is applied), then sends at half that rate and measures the
// end-to-end latency and the RSS.
func (s *suite) e2e(ctx context.Context) error {
	c := s.o.Consumer
	c.BatchSize = s.o.E2EBatch
	maxRun, err := InProcess(ctx, s.o.Factory, c, []string{"all"}, Options{
		Concurrency: s.o.Concurrency, Total: s.o.E2ETotal, Check: true, PollInterval: s.o.PollInterval})
	if err != nil {
		return fmt.Errorf("pipeline max: %w", err)
	}
	maxRun.Name = mPipeline
	s.res.Runs = append(s.res.Runs, maxRun)
	fmt.Fprintf(s.o.Progress, "suite: %s: %.0f events/s (ingress %.0f req/s); check %s\n", mPipeline, maxRun.PipelineRate, maxRun.IngressRPS, maxRun.Check)
	if maxRun.Check == nil || !maxRun.Check.OK {
		return fmt.Errorf("pipeline max: count check failed: %s", maxRun.Check)
	}
	s.record(mPipeline, "events/s", maxRun.PipelineRate)
	s.record(mPipelineIngress, "req/s", maxRun.IngressRPS)

	rate := maxRun.PipelineRate / 2
	total := s.o.E2ETotal
	half, err := InProcess(ctx, s.o.Factory, c, []string{"all"}, Options{
		Concurrency: s.o.Concurrency, Total: total, Rate: rate, Check: true, PollInterval: s.o.PollInterval})
	if err != nil {
		return fmt.Errorf("e2e at half rate: %w", err)
	}
	half.Name = mE2ERate
	s.res.Runs = append(s.res.Runs, half)
	fmt.Fprintf(s.o.Progress, "suite: e2e at %.0f events/s: %s; ingress %s; check %s\n", rate, half.E2E, half.Ingress, half.Check)
	if half.Check == nil || !half.Check.OK {
		return fmt.Errorf("e2e at half rate: count check failed: %s", half.Check)
	}
	s.record(mE2ERate, "events/s", rate)
	s.record(mE2EBusy, "% CPU", 100*half.MachineBusy)
	s.record(mE2EP50, "ms", half.E2E.P50Ms)
	s.record(mE2EP95, "ms", half.E2E.P95Ms)
	s.record(mE2EP99, "ms", half.E2E.P99Ms)
	if half.RelayE2E != nil && half.RelayE2E.N > 0 {
		s.record(mE2ERelayP99, "ms", half.RelayE2E.P99Ms)
	}
	if half.RSS != nil {
		s.record(mRSSStart, "MiB", float64(half.RSS.StartKB)/1024)
		s.record(mRSSPeak, "MiB", float64(half.RSS.PeakKB)/1024)
		s.record(mRSSEnd, "MiB", float64(half.RSS.EndKB)/1024)
	}
	return nil
}

// ratio adds the per-round ratio of two measurements and, with met, a
// target on its median.
func (s *suite) ratio(of, to, target string, met func(float64) bool) {
	a, b := s.by[of], s.by[to]
	if a == nil || b == nil || len(a.Values) != len(b.Values) {
		return
	}
	r := &Ratio{Name: of + " / " + to, Of: of, To: to, Target: target}
	for i := range a.Values {
		if b.Values[i] > 0 {
			r.PerRound = append(r.PerRound, a.Values[i]/b.Values[i])
		}
	}
	r.Median = Median(r.PerRound)
	if met != nil {
		ok := met(r.Median)
		r.Met = &ok
		s.res.Targets = append(s.res.Targets, Target{Name: r.Name, Goal: target, Value: r.Median, Met: ok})
	}
	s.res.Ratios = append(s.res.Ratios, r)
}

func (s *suite) ratios() {
	add := s.ratio
	add(mIngress, mFloor, "≥ 0.85", func(v float64) bool { return v >= 0.85 })
	add(mIngressCPU, mFloorCPU, "", nil)
	add(mIngress, mPubSync, "", nil)
	add(mFloor, mPubSync, "", nil)
	add(mPubAsync, mPubSync, "", nil)
	if len(s.o.Batches) > 0 {
		base := drainName(s.o.Batches[0])
		for _, b := range s.o.Batches[1:] {
			add(drainName(b), base, "≥ 5", func(v float64) bool { return v >= 5 })
		}
		for _, b := range s.o.Batches {
			target, met := "", (func(float64) bool)(nil)
			if b > 1 {
				target, met = "> 1", func(v float64) bool { return v > 1 }
			}
			add(drainName(b), mPGInsert, target, met)
		}
	}
	if m := s.by[mE2EP99]; m != nil {
		s.res.Targets = append(s.res.Targets, Target{Name: mE2EP99, Goal: "< 50 ms", Value: m.Median, Met: m.Median < 50})
	}
}

// Print writes the suite's tables.
func (r *SuiteResult) Print(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), %d MiB, %s, %s\n\n", m.CPUs, m.CPUModel, m.MemoryMiB, m.OS, m.GoVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tmedian\tunit\truns")
	for _, x := range r.Measurements {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Name, num(x.Median), x.Unit, nums(x.Values))
	}
	tw.Flush()
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ratio (per round, same round)\tmedian\ttarget\tmet\trounds")
		for _, x := range r.Ratios {
			met := ""
			if x.Met != nil {
				met = map[bool]string{true: "yes", false: "NO"}[*x.Met]
			}
			fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%s\n", x.Name, x.Median, x.Target, met, ratios(x.PerRound))
		}
		tw.Flush()
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w)
		for _, t := range r.Targets {
			met := "met"
			if !t.Met {
				met = "MISSED"
			}
			fmt.Fprintf(w, "target %-45s %-8s %10.2f  %s\n", t.Name, t.Goal, t.Value, met)
		}
	}
	if len(r.Background) > 0 {
		fmt.Fprintf(w, "\nmachine busy before the steps (other processes): median %.0f%%, max %.0f%%\n", 100*Median(r.Background), 100*slices.Max(r.Background))
	}
	for _, f := range r.Failures {
		fmt.Fprintln(w, "FAILURE:", f)
	}
}

func num(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func nums(vs []float64) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = num(v)
	}
	return strings.Join(out, " ")
}

func ratios(vs []float64) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(out, " ")
}

// DescribeMachine reports CPUs, model and memory of this machine.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return m
	}
	if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
		m.CPUModel = cpus[0].ModelName
	}
	if mem, err := fs.Meminfo(); err == nil && mem.MemTotal != nil {
		m.MemoryMiB = int64(*mem.MemTotal / 1024)
	}
	return m
}
