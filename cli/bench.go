package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/bridge"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/loadgen"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// BenchCmd drives load at hookbridge and measures it; see
// docs/PERFORMANCE.md.
type BenchCmd struct {
	Mode string `help:"What to measure: pipeline (webhooks through hookbridge, end to end, with the exactly-once count check), ingress (in-process, ingress role only), floor (a bare HTTP→publish server), publish-sync, publish-async (raw JetStream), pg-insert (raw Postgres single-row commits), drain (consumer apply throughput on a backlog), suite (all of them, repeated, with ratios and targets) or external (hookbridge serve with the default configuration and a nats-server, each in a process of its own, against the floor and raw commits, repeated; --soak runs it at a steady rate and samples both processes' memory). nats-server runs only the server the external modes start." enum:"pipeline,ingress,floor,publish-sync,publish-async,pg-insert,drain,suite,external,nats-server" default:"pipeline"`

	URL    string `help:"Base URL of a running hookbridge (pipeline mode). Empty starts one in-process with an embedded JetStream in a temporary directory and a fresh database created on --database-url's server and dropped afterwards."`
	Secret string `help:"Signing secret of --source (with --url; default: the source's configured secret)."`
	Source string `help:"Source to send as (with --url)." default:"demo"`
	NoDB   bool   `name:"no-db" help:"With --url: do not connect to the database (no end-to-end latency, no count check)."`
	RSSPID int    `name:"rss-pid" help:"With --url: sample the resident set of this process (the hookbridge under test, on this machine) during the run."`

	Concurrency int           `help:"Requests in flight (and sync publishers)." default:"32"`
	Total       int           `help:"Events to send." default:"10000"`
	Rate        float64       `help:"Events per second (open loop; latency counts from the scheduled send). 0 sends as fast as --concurrency allows."`
	Poll        time.Duration `help:"Inbox poll interval for the end-to-end latency." default:"2ms"`

	BatchSize           int           `name:"batch-size" help:"In-process consumer batch size (0: hookbridge's default, 1)."`
	BatchWait           time.Duration `name:"batch-wait" help:"In-process consumer batch wait (0: hookbridge's default)."`
	ConsumerConcurrency int           `name:"consumer-concurrency" help:"In-process consumer concurrency (0: hookbridge's default, 4)."`
	Roles               []string      `help:"In-process roles for pipeline mode." default:"all" enum:"ingress,consumer,relay,all"`
	ServerLogLevel      string        `name:"server-log-level" help:"Log level of the in-process hookbridge (its logs go to stderr)." default:"warn" enum:"debug,info,warn,error"`

	Window        int           `help:"Outstanding messages for publish-async." default:"4096"`
	PGConcurrency int           `name:"pg-concurrency" help:"Connections for pg-insert (0: the consumer concurrency)."`
	Repeat        int           `help:"Suite rounds (medians of these)." default:"3"`
	Stages        []string      `help:"Suite stages." default:"publish,http,postgres,drain,e2e" enum:"publish,http,postgres,drain,e2e"`
	Batches       []int         `help:"Suite drain batch sizes; the first is the baseline." default:"1,32,64"`
	E2EBatch      int           `name:"e2e-batch" help:"Suite e2e stage batch size." default:"32"`
	QuietBelow    float64       `name:"quiet-below" help:"Before the run (suite: before each step) wait until the machine's CPUs are less than this fraction busy (0 = do not wait), e.g. 0.15 on a shared machine."`
	QuietMaxWait  time.Duration `name:"quiet-max-wait" help:"Longest wait for a quiet machine." default:"10m"`

	Soak       time.Duration `help:"Soak: instead of the external rounds, send --rate events/s (default 1000) for this long through serve in its own process and sample its and nats-server's RSS every --soak-sample."`
	SoakSample time.Duration `name:"soak-sample" help:"RSS sampling interval of --soak." default:"5s"`
	NATSStore  string        `name:"nats-store" help:"Store directory of --mode nats-server." hidden:""`

	JSON       bool   `name:"json" help:"Print the result as JSON instead of a table."`
	CPUProfile string `name:"cpu-profile" help:"Write a CPU profile of the whole process (load generator and in-process hookbridge) to this file." type:"path"`
	MemProfile string `name:"mem-profile" help:"Pipeline mode: write a heap profile of the whole process to this file once every event was applied, before the in-process hookbridge stops." type:"path"`
}

// Run implements the bench command.
func (c *BenchCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	if c.Total <= 0 || c.Concurrency <= 0 {
		return errors.New("bench: --total and --concurrency must be positive")
	}
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	consumer := loadgen.ConsumerSettings{BatchSize: c.BatchSize, BatchWait: c.BatchWait, Concurrency: c.ConsumerConcurrency}
	factory := c.envFactory(cfg, rt)
	adminURL := cfg.PoolURL()
	progress := rt.stderr

	if c.QuietBelow > 0 && c.Mode != "suite" {
		busy, err := loadgen.WaitQuiet(ctx, c.QuietBelow, c.QuietMaxWait)
		if err != nil {
			return err
		}
		fmt.Fprintf(progress, "bench: machine %.0f%% busy before the run\n", 100*busy)
	}
	var out interface{ Print(io.Writer) }
	switch c.Mode {
	case "pipeline":
		if c.URL != "" {
			out, err = c.external(ctx, cfg, progress)
		} else {
			out, err = loadgen.InProcess(ctx, factory, consumer, c.Roles, c.loadOptions(progress))
		}
	case "ingress":
		out, err = loadgen.InProcess(ctx, factory, consumer, []string{app.RoleIngress}, c.loadOptions(progress))
	case "floor":
		var f *loadgen.Floor
		if f, err = loadgen.StartFloor(ctx); err != nil {
			return err
		}
		o := c.loadOptions(progress)
		o.URL, o.Secret, o.Check = f.URL, app.DevSecret, false
		var r *loadgen.Result
		r, err = loadgen.Load(ctx, o)
		if closeErr := f.Close(); err == nil {
			err = closeErr
		}
		out = r
	case "publish-sync":
		var t loadgen.Throughput
		if t, err = loadgen.RawPublishSync(ctx, c.Total, c.Concurrency); err == nil {
			out = throughput(t)
		}
	case "publish-async":
		var t loadgen.Throughput
		if t, err = loadgen.RawPublishAsync(ctx, c.Total, c.Window); err == nil {
			out = throughput(t)
		}
	case "pg-insert":
		n := c.PGConcurrency
		if n <= 0 {
			n = max(c.ConsumerConcurrency, 4)
		}
		var t loadgen.Throughput
		if t, err = loadgen.RawInsert(ctx, adminURL, c.Total, n); err == nil {
			out = throughput(t)
		}
	case "drain":
		var d *loadgen.DrainResult
		d, err = loadgen.Drain(ctx, factory, consumer, c.Total, c.Concurrency, progress)
		if d != nil {
			out = drainResult{d}
			if err == nil && !d.Check.OK {
				err = errors.New("bench: the exactly-once count check failed")
			}
		}
	case "nats-server":
		if c.NATSStore == "" {
			return errors.New("bench: --mode nats-server needs --nats-store")
		}
		return loadgen.ServeNATS(ctx, c.NATSStore, bridge.RequiredMaxPayload(cfg.MaxBodyBytes), rt.stdout)
	case "external":
		exe, exeErr := os.Executable()
		if exeErr != nil {
			return fmt.Errorf("bench: find the hookbridge binary: %w", exeErr)
		}
		if c.Soak > 0 {
			var r *loadgen.SoakResult
			r, err = loadgen.Soak(ctx, loadgen.SoakOptions{Exe: exe, AdminURL: adminURL, Duration: c.Soak, Rate: c.Rate,
				Concurrency: c.Concurrency, Sample: c.SoakSample, Progress: progress})
			if r != nil {
				out = r
			}
			break
		}
		var s *loadgen.SuiteResult
		s, err = loadgen.RunExternal(ctx, loadgen.ExternalOptions{Exe: exe, AdminURL: adminURL, Rounds: c.Repeat,
			Concurrency: c.Concurrency, Total: c.Total, PGConcurrency: c.PGConcurrency, Progress: progress})
		if s != nil {
			out = s
		}
	case "suite":
		var s *loadgen.SuiteResult
		s, err = loadgen.RunSuite(ctx, loadgen.SuiteOptions{
			Factory: factory, AdminURL: adminURL, Stages: c.Stages, Repeat: c.Repeat,
			Concurrency: c.Concurrency, Total: c.Total, AsyncWindow: c.Window,
			PGConcurrency: c.PGConcurrency, PGTotal: c.Total / 2, DrainTotal: c.Total, E2ETotal: c.Total,
			Consumer: consumer, Batches: c.Batches, E2EBatch: c.E2EBatch, PollInterval: c.Poll, Progress: progress,
			QuietBelow: c.QuietBelow, QuietMaxWait: c.QuietMaxWait,
		})
		if s != nil {
			out = s
		}
	}
	if out != nil && !isNil(out) {
		if c.JSON {
			enc := json.NewEncoder(rt.stdout)
			enc.SetIndent("", "  ")
			if encErr := enc.Encode(unwrap(out)); encErr != nil && err == nil {
				err = encErr
			}
		} else {
			out.Print(rt.stdout)
		}
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if r, ok := out.(*loadgen.Result); ok && r != nil {
		if r.Check != nil && !r.Check.OK {
			return errors.New("bench: the exactly-once count check failed")
		}
		if r.Failed > 0 {
			return fmt.Errorf("bench: %d event(s) were not accepted", r.Failed)
		}
	}
	if s, ok := out.(*loadgen.SuiteResult); ok && len(s.Failures) > 0 {
		return fmt.Errorf("bench: %d suite run(s) failed", len(s.Failures))
	}
	return nil
}

func (c *BenchCmd) loadOptions(progress io.Writer) loadgen.Options {
	o := loadgen.Options{
		Source: c.Source, Concurrency: c.Concurrency, Total: c.Total, Rate: c.Rate,
		Check: true, PollInterval: c.Poll, Progress: progress,
	}
	if c.MemProfile != "" {
		o.Finished = func() {
			f, err := os.Create(c.MemProfile)
			if err != nil {
				fmt.Fprintln(progress, "bench: heap profile:", err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				fmt.Fprintln(progress, "bench: heap profile:", err)
			}
		}
	}
	return o
}

// external runs pipeline mode against the running hookbridge at --url.
func (c *BenchCmd) external(ctx context.Context, cfg app.Config, progress io.Writer) (*loadgen.Result, error) {
	o := c.loadOptions(progress)
	o.URL, o.Secret, o.RSSPID = c.URL, c.Secret, c.RSSPID
	if o.Secret == "" {
		for i := range cfg.Sources {
			if s := &cfg.Sources[i]; s.Name == c.Source {
				if s.Scheme != verify.SchemeStandardWebhooks {
					return nil, fmt.Errorf("source %q uses %s; bench signs Standard Webhooks only", c.Source, s.Scheme)
				}
				o.Secret = s.ResolvedSecrets()[0]
			}
		}
		if o.Secret == "" {
			return nil, fmt.Errorf("source %q is not configured; pass --secret", c.Source)
		}
	}
	if c.NoDB {
		o.Check = false
	} else {
		o.DatabaseURL = cfg.PoolURL()
	}
	if cfg.NATSURL != "" && !c.NoDB {
		nc, err := nats.Connect(cfg.NATSURL, nats.Name("hookbridge-bench"))
		if err != nil {
			return nil, fmt.Errorf("connect nats: %w", err)
		}
		defer nc.Close()
		o.Events = subscriber(nc)
	}
	for _, cc := range cfg.Consumers {
		if cc.Handler == "orders" {
			o.Consumer = cc.Name
			break
		}
	}
	return loadgen.Load(ctx, o)
}

// envFactory builds the in-process environments of this command.
func (c *BenchCmd) envFactory(base app.Config, rt *runtime) loadgen.EnvFactory {
	return BenchEnvFactory(base.PoolURL(), base, rt.handlers, c.ServerLogLevel, rt.stderr)
}

// BenchEnvFactory builds in-process environments for [loadgen]: each has a
// fresh database created on adminURL's server (dropped by Close) and a
// JetStream store in a temporary directory, the default demo source with a
// random secret and the orders consumer with the given settings. Streams
// and relay settings are taken from base. The servers log at logLevel to
// logOut.
func BenchEnvFactory(adminURL string, base app.Config, handlers app.Handlers, logLevel string, logOut io.Writer) loadgen.EnvFactory {
	return func(ctx context.Context, cs loadgen.ConsumerSettings) (loadgen.Env, error) {
		db, err := loadgen.CreateDatabase(ctx, adminURL, "hookbridge_bench")
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "hookbridge-bench-")
		if err != nil {
			_ = db.Drop()
			return nil, err
		}
		key := make([]byte, 24)
		_, _ = rand.Read(key)
		secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
		noEnv := func(string) (string, bool) { return "", false }
		cfg := app.Config{
			HTTPAddr:    "127.0.0.1:0",
			DatabaseURL: db.URL,
			DataDir:     dir,
			LogLevel:    logLevel,
			LogFormat:   "text",
			Streams:     base.Streams,
			Relay:       base.Relay,
			Sources:     app.DefaultSources(func(k string) (string, bool) { return secret, k == "HOOKBRIDGE_DEMO_SECRET" }),
			Consumers:   app.DefaultConsumers(),
		}
		cfg.Consumers[0].BatchSize = cs.BatchSize
		cfg.Consumers[0].BatchWait = cs.BatchWait
		cfg.Consumers[0].Concurrency = cs.Concurrency
		cfg.ApplyEnv(noEnv)
		if err := cfg.Validate(noEnv, handlers); err != nil {
			_ = db.Drop()
			_ = os.RemoveAll(dir)
			return nil, err
		}
		return &benchEnv{cfg: cfg, handlers: handlers, db: db, dir: dir, secret: secret, log: app.NewLogger(cfg, logOut)}, nil
	}
}

// benchEnv is one in-process environment (see [loadgen.Env]).
type benchEnv struct {
	cfg      app.Config
	handlers app.Handlers
	db       *loadgen.TempDatabase
	dir      string
	secret   string
	log      *slog.Logger
}

func (e *benchEnv) DatabaseURL() string { return e.db.URL }
func (e *benchEnv) Secret() string      { return e.secret }

func (e *benchEnv) Close() error {
	err := e.db.Drop()
	return errors.Join(err, os.RemoveAll(e.dir))
}

// Start runs a app.Server with roles until the instance's Stop.
func (e *benchEnv) Start(ctx context.Context, roles []string) (*loadgen.Instance, error) {
	srv, err := app.NewServer(e.cfg, e.handlers, roles, e.log)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx, func(addr string) { ready <- addr }) }()
	select {
	case addr := <-ready:
		var once sync.Once
		var stopErr error
		stop := func() error {
			once.Do(func() { cancel(); stopErr = <-done })
			return stopErr
		}
		return &loadgen.Instance{URL: "http://" + addr, Stop: stop, Events: subscriber(srv.NATS()), Redelivered: e.redelivered(srv)}, nil
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("hookbridge stopped before it was ready")
		}
		return nil, err
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	}
}

// redelivered reports the orders consumer's redelivery count.
func (e *benchEnv) redelivered(srv *app.Server) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		cons, err := srv.JetStream().Consumer(ctx, stream.Hooks, e.cfg.Consumers[0].Name)
		if err != nil {
			return 0, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.NumRedelivered, nil
	}
}

// subscriber subscribes to events.> on nc (core NATS: it sees each
// message as the relay publishes it).
func subscriber(nc *nats.Conn) loadgen.EventSource {
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

// throughput prints a raw measurement.
type throughput loadgen.Throughput

func (t throughput) Print(w io.Writer) { fmt.Fprintln(w, loadgen.Throughput(t)) }

type drainResult struct{ *loadgen.DrainResult }

func (d drainResult) Print(w io.Writer) { fmt.Fprintln(w, strings.TrimSpace(d.DrainResult.String())) }

func unwrap(v any) any {
	switch x := v.(type) {
	case throughput:
		return loadgen.Throughput(x)
	case drainResult:
		return x.DrainResult
	}
	return v
}

func isNil(v any) bool {
	switch x := v.(type) {
	case *loadgen.Result:
		return x == nil
	case *loadgen.SuiteResult:
		return x == nil
	case *loadgen.SoakResult:
		return x == nil
	}
	return false
}
