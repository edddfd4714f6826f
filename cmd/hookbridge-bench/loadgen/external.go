package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/pgtemp"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// ExternalOptions configure [RunExternal]: `hookbridge serve` in a process
// of its own with the default configuration, against a nats-server in a
// process of its own on loopback, compared in every round with the bare
// HTTP→publish floor on such a server and with raw single-row commits.
type ExternalOptions struct {
	// Exe is the hookbridge binary (it runs `serve`); NATSExe the load
	// tool's (it runs `--mode nats-server`).
	Exe     string
	NATSExe string
	// AdminURL is the Postgres server the databases are created on.
	AdminURL string
	Rounds   int // default 3; figures are medians, ratios medians of per-round ratios
	// Concurrency is the senders' keep-alive connections (default 32),
	// Total the events per run (default 20,000).
	Concurrency int
	Total       int
	// PGConcurrency and PGTotal size the raw single-row commits (default 8
	// connections, Total/2 rows).
	PGConcurrency int
	PGTotal       int
	// PaidEvery and PaidFirst are Options' for the all-roles runs.
	PaidEvery int
	PaidFirst bool
	// NoHalf skips the end-to-end latency run at half the maximum.
	NoHalf bool
	// Ordering adds, to every round, closed-loop runs of the demo source
	// without its ordering key and with other partition counts, against
	// the default (keyed, stream.DefaultPartitions) in the same round.
	Ordering bool
	Progress io.Writer
}

func (o *ExternalOptions) setDefaults() error {
	if o.Exe == "" || o.NATSExe == "" {
		return errors.New("loadgen: external: no hookbridge or hookbridge-bench binary")
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Total <= 0 {
		o.Total = 20000
	}
	if o.PGConcurrency <= 0 {
		o.PGConcurrency = 8
	}
	if o.PGTotal <= 0 {
		o.PGTotal = max(o.Total/2, 1)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return nil
}

// Names of the external measurement's figures.
const (
	xFloor          = "floor HTTP→publish (own nats-server)"
	xIngress        = "hookbridge ingress, all roles"
	xApplied        = "applied (first send → last applied)"
	xRaw            = "postgres single-row commits"
	xServeCPU       = "hookbridge CPU per event"
	xPostgresCPU    = "postgres CPU per event"
	xNATSCPU        = "nats-server CPU per event"
	xTotalCPU       = "hookbridge + postgres CPU per event"
	xIngressCPU     = "hookbridge CPU per ingress request (ingress role only)"
	xIngressOnly    = "hookbridge ingress, ingress role only"
	xHalfRate       = "e2e run rate (50% of applied max)"
	xHalfP50        = "e2e p50 @ 50% of max"
	xHalfP99        = "e2e p99 @ 50% of max"
	xHalfRelayP99   = "e2e p99 to the relayed event @ 50%"
	xServeRSSPeak   = "hookbridge RSS peak (max run)"
	xNATSRSSPeak    = "nats-server RSS peak (max run)"
	xMachineBusyMax = "machine busy during the max run"
	xHooksBytes     = "HOOKS bytes per message"
	xInboxBytes     = "inbox bytes per row (with indexes)"
	xOutboxBytes    = "outbox bytes per row (with indexes)"
	xFloorMachine   = "machine CPU per floor request (all processes)"
	xPGWork         = "postgres CPU per event, its writes alone"
	xWAL            = "postgres WAL bytes per event"
	xCeiling        = "applied ceiling (floor ingress + postgres writes alone)"
	xUnkeyed        = "applied, demo source without ordering key"
)

// orderingPartitions are the partition counts an Ordering run compares
// with the default.
var orderingPartitions = []int{1, 4, 16}

func partitionsName(n int) string { return fmt.Sprintf("applied, keyed, %d partitions", n) }

// RunExternal runs the rounds and returns the medians, ratios and targets.
func RunExternal(ctx context.Context, o ExternalOptions) (*SuiteResult, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	s := &suite{o: SuiteOptions{Progress: o.Progress}, by: map[string]*Measurement{}, res: &SuiteResult{Machine: DescribeMachine(), Options: map[string]any{
		"mode": "external", "rounds": o.Rounds, "concurrency": o.Concurrency, "total": o.Total,
		"pg_concurrency": o.PGConcurrency, "pg_total": o.PGTotal, "paid_every": o.PaidEvery, "serve": "own process, default configuration", "nats": "own process, loopback",
	}}}
	x := &external{o: o, s: s}
	steps := []func(context.Context) error{x.floor, x.raw, x.pgWork, x.ingressOnly, x.maxAndHalf}
	if o.Ordering {
		steps = append(steps, x.orderingVariants)
	}
	sampleBusy := func(ctx context.Context) (float64, error) { return MachineBusy(ctx, time.Second) }
	if err := s.runRounds(ctx, "external", o.Rounds, steps, sampleBusy); err != nil {
		return nil, err
	}
	s.ratio(xIngress, xFloor, "≥ 0.70", func(v float64) bool { return v >= 0.7 })
	s.ratio(xApplied, xRaw, "≥ 1.0", func(v float64) bool { return v >= 1 })
	x.ceiling()
	s.ratio(xCeiling, xRaw, "", nil)
	s.ratio(xApplied, xCeiling, "", nil)
	if o.Ordering {
		s.ratio(xApplied, xUnkeyed, "≥ 0.80", func(v float64) bool { return v >= 0.8 })
		for _, n := range orderingPartitions {
			s.ratio(partitionsName(n), xApplied, "", nil)
		}
	}
	if m := s.by[xHalfP99]; m != nil {
		s.res.Targets = append(s.res.Targets, Target{Name: xHalfP99, Goal: "< 50 ms", Value: m.Median, Met: m.Median < 50})
	}
	if m := s.by[xTotalCPU]; m != nil {
		s.res.Targets = append(s.res.Targets, Target{Name: xTotalCPU, Goal: "≤ 100 µs", Value: m.Median, Met: m.Median <= 100})
	}
	if m := s.by[xWAL]; m != nil {
		s.res.Targets = append(s.res.Targets, Target{Name: xWAL, Goal: "≤ 1,200 B", Value: m.Median, Met: m.Median <= 1200})
	}
	return s.res, nil
}

type external struct {
	o ExternalOptions
	s *suite
}

// externalEnv is one fresh environment: a nats-server process, an empty
// database and (once started) a serve process.
type externalEnv struct {
	dir     string
	nats    *process
	natsURL string
	db      *pgtemp.Database
	serve   *serveProcess
	// demo, when set, replaces the default configuration's demo source.
	demo *demoConfig
}

func (x *external) startEnv(ctx context.Context, withDB bool) (*externalEnv, error) {
	dir, err := os.MkdirTemp("", "hookbridge-bench-ext-")
	if err != nil {
		return nil, err
	}
	e := &externalEnv{dir: dir}
	if e.nats, e.natsURL, err = startNATSProcess(ctx, x.o.NATSExe, dir); err != nil {
		e.close()
		return nil, err
	}
	if withDB {
		if e.db, err = pgtemp.Create(ctx, x.o.AdminURL, "hookbridge_bench_ext", ""); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

func (e *externalEnv) startServe(ctx context.Context, exe string, roles ...string) error {
	dbURL := "postgres://127.0.0.1:1/unused" // the ingress role never connects
	if e.db != nil {
		dbURL = e.db.URL
	}
	var err error
	e.serve, err = startServeProcess(ctx, exe, e.dir, e.natsURL, dbURL, e.demo, roles)
	return err
}

// close stops the processes and removes the database and the store.
func (e *externalEnv) close() error {
	var errs []error
	if e.serve != nil {
		errs = append(errs, e.serve.stop(30*time.Second))
	}
	if e.nats != nil {
		errs = append(errs, e.nats.stop(10*time.Second))
	}
	if e.db != nil {
		errs = append(errs, e.db.Drop())
	}
	if err := errors.Join(errs...); err != nil {
		return err // keep the logs in e.dir
	}
	return os.RemoveAll(e.dir)
}

func (x *external) floor(ctx context.Context) error {
	e, err := x.startEnv(ctx, false)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	defer e.close() //nolint:errcheck // best effort
	f, err := StartFloorOn(ctx, e.natsURL)
	if err != nil {
		return err
	}
	r, err := Load(ctx, Options{URL: f.URL, Secret: suiteSecret, Concurrency: x.o.Concurrency, Total: x.o.Total})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	r.Name = xFloor
	x.s.res.Runs = append(x.s.res.Runs, r)
	fmt.Fprintf(x.o.Progress, "external: %s: %.0f req/s, %s\n", xFloor, r.IngressRPS, r.Ingress)
	if r.Failed > 0 {
		return fmt.Errorf("floor: %d requests failed (%v)", r.Failed, r.Statuses)
	}
	x.s.record(xFloor, "req/s", r.IngressRPS)
	if r.IngressRPS > 0 && r.MachineBusy > 0 {
		x.s.record(xFloorMachine, "µs/req", r.MachineBusy*float64(runtime.NumCPU())*1e6/r.IngressRPS)
	}
	return nil
}

// pgWork measures the Postgres CPU an event needs for its writes alone
// (see [MeasurePostgresWork]), at the consumer's default batch size.
func (x *external) pgWork(ctx context.Context) error {
	w, err := MeasurePostgresWork(ctx, x.o.AdminURL, x.o.PGTotal, engine.DefaultBatchSize)
	if err != nil {
		return fmt.Errorf("postgres writes alone: %w", err)
	}
	fmt.Fprintf(x.o.Progress, "external: %s: %.0f µs (%d events in batches of %d, one connection, %.2fs)\n", xPGWork, w.CPUPerEventUs, w.Events, w.Batch, w.Seconds)
	x.s.record(xPGWork, "µs/event", w.CPUPerEventUs)
	return nil
}

// ceiling records, per round, the most events per second this machine
// could apply if the ingress cost no more than the bare HTTP→publish
// floor (all processes: server, nats-server, load generator) and each
// event added only Postgres's CPU for its writes, measured alone: no
// consumer or relay CPU, no NATS deliveries, acks or relayed messages.
// The real pipeline must stay below it.
func (x *external) ceiling() {
	floor, pg := x.s.by[xFloorMachine], x.s.by[xPGWork]
	if floor == nil || pg == nil || len(floor.Values) != x.o.Rounds || len(pg.Values) != x.o.Rounds {
		// Values pair by position: with a round missing on either side
		// they would pair figures of different rounds.
		x.s.fail("ceiling not computed: the floor's machine CPU and Postgres's writes alone need a figure in each of the %d rounds", x.o.Rounds)
		return
	}
	for i := range floor.Values {
		x.s.record(xCeiling, "events/s", float64(runtime.NumCPU())*1e6/(floor.Values[i]+pg.Values[i]))
	}
	m := x.s.by[xCeiling]
	m.Median = Median(m.Values)
}

func (x *external) raw(ctx context.Context) error {
	t, err := RawInsert(ctx, x.o.AdminURL, x.o.PGTotal, x.o.PGConcurrency)
	if err != nil {
		return fmt.Errorf("raw commits: %w", err)
	}
	x.s.addThroughput("external", t)
	x.s.record(xRaw, "rows/s", t.PerSecond)
	return nil
}

// ingressOnly measures the ingress's own CPU per request: serve with the
// ingress role only, so no apply work is mixed in.
func (x *external) ingressOnly(ctx context.Context) error {
	e, err := x.startEnv(ctx, false)
	if err != nil {
		return fmt.Errorf("ingress only: %w", err)
	}
	defer e.close() //nolint:errcheck // best effort
	if err := e.startServe(ctx, x.o.Exe, "ingress"); err != nil {
		return fmt.Errorf("ingress only: %w", err)
	}
	cpu0 := e.serve.CPU()
	r, err := Load(ctx, Options{URL: e.serve.URL, Secret: e.serve.Secret, Concurrency: x.o.Concurrency, Total: x.o.Total})
	if err != nil {
		return fmt.Errorf("ingress only: %w", err)
	}
	cpu := e.serve.CPU() - cpu0
	r.Name = xIngressOnly
	x.s.res.Runs = append(x.s.res.Runs, r)
	if r.Failed > 0 {
		return fmt.Errorf("ingress only: %d requests failed (%v)", r.Failed, r.Statuses)
	}
	perReq := float64(cpu.Microseconds()) / float64(r.Accepted+r.Duplicates)
	fmt.Fprintf(x.o.Progress, "external: %s: %.0f req/s, %.0f µs CPU per request in hookbridge\n", xIngressOnly, r.IngressRPS, perReq)
	x.s.record(xIngressOnly, "req/s", r.IngressRPS)
	x.s.record(xIngressCPU, "µs/req", perReq)
	return nil
}

// ExternalRun is one all-roles run against serve in its own process.
type ExternalRun struct {
	*Result
	// CPU per applied event over the run (first send to last applied):
	// the serve process, Postgres's backends of its database, the
	// nats-server process.
	ServeCPUPerEventUs    float64 `json:"serve_cpu_per_event_us"`
	PostgresCPUPerEventUs float64 `json:"postgres_cpu_per_event_us"`
	NATSCPUPerEventUs     float64 `json:"nats_cpu_per_event_us"`
	ServeRSS              RSS     `json:"serve_rss"`
	NATSRSS               RSS     `json:"nats_rss"`
	// Storage is what the run left on disk, per event.
	Storage *Storage `json:"storage,omitempty"`
}

// Storage is the space one event takes where hookbridge keeps it.
type Storage struct {
	// HooksBytesPerMsg is HOOKS's stored bytes per message (JetStream's
	// own accounting: body, headers, subject, per-message overhead).
	HooksBytesPerMsg float64 `json:"hooks_bytes_per_msg"`
	// InboxBytesPerRow and OutboxBytesPerRow are the tables' total size
	// (heap, indexes, TOAST) per row.
	InboxBytesPerRow  float64 `json:"inbox_bytes_per_row"`
	OutboxBytesPerRow float64 `json:"outbox_bytes_per_row"`
}

// measureStorage reads the sizes once the run's events are in.
func measureStorage(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream) (*Storage, error) {
	st := &Storage{}
	s, err := js.Stream(ctx, "HOOKS")
	if err != nil {
		return nil, fmt.Errorf("stream HOOKS: %w", err)
	}
	if info := s.CachedInfo(); info.State.Msgs > 0 {
		st.HooksBytesPerMsg = float64(info.State.Bytes) / float64(info.State.Msgs)
	}
	type footprint func(context.Context, store.Querier) (int64, int64, error)
	for _, t := range []struct {
		table string
		read  footprint
		dst   *float64
	}{{store.TableInbox, store.InboxFootprint, &st.InboxBytesPerRow}, {store.TableOutbox, store.OutboxFootprint, &st.OutboxBytesPerRow}} {
		table, dst := t.table, t.dst
		size, rows, err := t.read(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("size of %s: %w", table, err)
		}
		if rows > 0 {
			*dst = float64(size) / float64(rows)
		}
	}
	return st, nil
}

// allRoles runs total events at rate (0: closed loop) through serve with
// the default configuration and every role, and checks the counts.
func (x *external) allRoles(ctx context.Context, rate float64) (*ExternalRun, error) {
	return x.allRolesWith(ctx, rate, nil)
}

// allRolesWith is allRoles with serve configured by demo (nil: the
// default configuration).
func (x *external) allRolesWith(ctx context.Context, rate float64, demo *demoConfig) (*ExternalRun, error) {
	e, err := x.startEnv(ctx, true)
	if err != nil {
		return nil, err
	}
	defer e.close() //nolint:errcheck // best effort
	e.demo = demo
	if err := e.startServe(ctx, x.o.Exe); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(e.natsURL, nats.Name("hookbridge-bench"))
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	defer nc.Close()
	pcfg, err := pgxpool.ParseConfig(e.db.URL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 1
	pcfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	serveRSS := startRSSOf(e.serve.RSSKB, 250*time.Millisecond)
	natsRSS := startRSSOf(e.nats.RSSKB, 250*time.Millisecond)
	pg0, err := backendCPUs(ctx, pool)
	if err != nil {
		return nil, err
	}
	serve0, nats0 := e.serve.CPU(), e.nats.CPU()
	r, err := Load(ctx, Options{URL: e.serve.URL, Secret: e.serve.Secret, DatabaseURL: e.db.URL, Check: true,
		Concurrency: x.o.Concurrency, Total: x.o.Total, Rate: rate, PaidEvery: x.o.PaidEvery, PaidFirst: x.o.PaidFirst, Events: NATSEvents(nc)})
	serveCPU, natsCPU := e.serve.CPU()-serve0, e.nats.CPU()-nats0
	pg1, pgErr := backendCPUs(ctx, pool)
	run := &ExternalRun{Result: r, ServeRSS: serveRSS.finish(), NATSRSS: natsRSS.finish()}
	run.ServeRSS.Of, run.NATSRSS.Of = "hookbridge serve", "nats-server"
	if err != nil {
		return run, err
	}
	if pgErr != nil {
		return run, pgErr
	}
	if n := float64(r.Applied); n > 0 {
		run.ServeCPUPerEventUs = float64(serveCPU.Microseconds()) / n
		run.NATSCPUPerEventUs = float64(natsCPU.Microseconds()) / n
		run.PostgresCPUPerEventUs = float64(cpuDelta(pg0, pg1).Microseconds()) / n
	}
	if r.Check == nil || !r.Check.OK {
		return run, fmt.Errorf("count check failed: %s", r.Check)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return run, err
	}
	if run.Storage, err = measureStorage(ctx, pool, js); err != nil {
		return run, err
	}
	return run, nil
}

// maxAndHalf runs the pipeline closed loop, then at half its applied rate
// for the end-to-end latency.
func (x *external) maxAndHalf(ctx context.Context) error {
	m, err := x.allRoles(ctx, 0)
	if m != nil {
		m.Name = "all roles, closed loop"
		x.s.res.Runs = append(x.s.res.Runs, m)
	}
	if err != nil {
		return fmt.Errorf("all roles: %w", err)
	}
	fmt.Fprintf(x.o.Progress, "external: all roles: ingress %.0f req/s, applied %.0f events/s; CPU per event %.0f µs hookbridge, %.0f µs postgres, %.0f µs nats-server; WAL %s; check %s\n",
		m.IngressRPS, m.AppliedFromFirstSend, m.ServeCPUPerEventUs, m.PostgresCPUPerEventUs, m.NATSCPUPerEventUs, m.WAL, m.Check)
	x.s.record(xIngress, "req/s", m.IngressRPS)
	x.s.record(xApplied, "events/s", m.AppliedFromFirstSend)
	x.s.record(xServeCPU, "µs/event", m.ServeCPUPerEventUs)
	x.s.record(xPostgresCPU, "µs/event", m.PostgresCPUPerEventUs)
	x.s.record(xNATSCPU, "µs/event", m.NATSCPUPerEventUs)
	x.s.record(xTotalCPU, "µs/event", m.ServeCPUPerEventUs+m.PostgresCPUPerEventUs)
	if m.WAL != nil && m.WAL.OtherWrites == 0 {
		x.s.record(xWAL, "B/event", m.WAL.BytesPerEvent)
	} else if m.WAL != nil {
		fmt.Fprintf(x.o.Progress, "external: WAL per event not recorded: %s\n", m.WAL)
	}
	x.s.record(xServeRSSPeak, "MiB", float64(m.ServeRSS.PeakKB)/1024)
	x.s.record(xNATSRSSPeak, "MiB", float64(m.NATSRSS.PeakKB)/1024)
	x.s.record(xMachineBusyMax, "% CPU", 100*m.MachineBusy)
	if st := m.Storage; st != nil {
		x.s.record(xHooksBytes, "B/msg", st.HooksBytesPerMsg)
		x.s.record(xInboxBytes, "B/row", st.InboxBytesPerRow)
		x.s.record(xOutboxBytes, "B/row", st.OutboxBytesPerRow)
	}
	if x.o.NoHalf || m.AppliedFromFirstSend <= 0 {
		return nil
	}
	rate := m.AppliedFromFirstSend / 2
	h, err := x.allRoles(ctx, rate)
	if h != nil {
		h.Name = fmt.Sprintf("all roles at %.0f events/s", rate)
		x.s.res.Runs = append(x.s.res.Runs, h)
	}
	if err != nil {
		return fmt.Errorf("half rate: %w", err)
	}
	fmt.Fprintf(x.o.Progress, "external: e2e at %.0f events/s: %s; check %s\n", rate, h.E2E, h.Check)
	x.s.record(xHalfRate, "events/s", rate)
	x.s.record(xHalfP50, "ms", h.E2E.P50Ms)
	x.s.record(xHalfP99, "ms", h.E2E.P99Ms)
	if h.RelayE2E != nil && h.RelayE2E.N > 0 {
		x.s.record(xHalfRelayP99, "ms", h.RelayE2E.P99Ms)
	}
	return nil
}

// NATSEvents subscribes to events.> on nc (core NATS: each message as the
// relay publishes it); nil for a nil nc.
func NATSEvents(nc *nats.Conn) EventSource {
	if nc == nil {
		return nil
	}
	return func(fn func(data []byte)) (func(), error) {
		sub, err := nc.Subscribe(stream.EventsRoot+".>", func(m *nats.Msg) { fn(m.Data) })
		if err != nil {
			return nil, err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return nil, err
		}
		return func() { _ = sub.Unsubscribe() }, nil
	}
}

// backendCPUs reads the CPU time of every server process connected to
// pool's database except the load generator's own (application_name
// hookbridge-bench): hookbridge's connections, by pid.
func backendCPUs(ctx context.Context, pool *pgxpool.Pool) (map[int32]time.Duration, error) {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name <> $1 AND pid <> pg_backend_pid()`, benchAppName)
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	out := make(map[int32]time.Duration, len(pids))
	for _, pid := range pids {
		out[pid] = procCPU(int(pid))
	}
	return out, nil
}

// cpuDelta is the CPU the backends used between two readings (a backend
// that appeared in between counts whole; one that left is lost, which a
// pooled connection rarely does).
func cpuDelta(before, after map[int32]time.Duration) time.Duration {
	var d time.Duration
	for pid, cpu := range after {
		d += cpu - before[pid]
	}
	return d
}

// orderingVariants measures the demo source without its ordering key and
// with other partition counts, each a closed-loop run of its own.
func (x *external) orderingVariants(ctx context.Context) error {
	variants := []struct {
		name string
		demo demoConfig
	}{{xUnkeyed, demoConfig{Unkeyed: true}}}
	for _, n := range orderingPartitions {
		variants = append(variants, struct {
			name string
			demo demoConfig
		}{partitionsName(n), demoConfig{Partitions: n}})
	}
	for _, v := range variants {
		m, err := x.allRolesWith(ctx, 0, &v.demo)
		if m != nil {
			m.Name = v.name
			x.s.res.Runs = append(x.s.res.Runs, m)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		fmt.Fprintf(x.o.Progress, "external: %s: applied %.0f events/s; check %s\n", v.name, m.AppliedFromFirstSend, m.Check)
		x.s.record(v.name, "events/s", m.AppliedFromFirstSend)
	}
	return nil
}
