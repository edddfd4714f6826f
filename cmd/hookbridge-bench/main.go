// Command hookbridge-bench is hookbridge's load tool: signed webhooks at a
// given concurrency or rate against hookbridge (the app library started in
// this process, or a running one at --url), throughput, latency
// percentiles and the exactly-once count check; see docs/PERFORMANCE.md.
// It is a binary of its own so that the product binary carries none of it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/cli"
	"github.com/hookbridge/hookbridge/cmd/hookbridge-bench/loadgen"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/internal/engine"
)

func main() { os.Exit(run(os.Args[1:])) }

// command is the command line: hookbridge's global flags (configuration
// file, database, NATS) and the load tool's own.
type command struct {
	cli.Globals
	BenchCmd
}

// runtime carries what the run needs.
type runtime struct {
	handlers app.Handlers
	stdout   io.Writer
	stderr   io.Writer
	env      app.Env
}

// run parses args and runs the load; it returns the exit code (0 done, 1
// failed, 2 bad command line): the hookbridge commands' codes, so a script
// that drove the load as `hookbridge bench` (docs/PERFORMANCE.md) reads
// this tool's alike.
func run(args []string) int {
	var c command
	parser, err := newParser(&c, kong.Exit(func(code int) { os.Exit(code) }))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := parser.Parse(args); err != nil {
		parser.FatalIfErrorf(err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rt := &runtime{handlers: builtin.Handlers(), stdout: os.Stdout, stderr: os.Stderr, env: cli.LookupEnv}
	if err := c.BenchCmd.Run(ctx, &c.Globals, rt); err != nil {
		fmt.Fprintln(os.Stderr, "hookbridge-bench:", err)
		return 1
	}
	return 0
}

// newParser is the command line's parser for c. The help states
// hookbridge's defaults from the constants serve uses, so that it cannot
// drift from them.
func newParser(c *command, options ...kong.Option) (*kong.Kong, error) {
	return kong.New(c, append([]kong.Option{
		kong.Name("hookbridge-bench"),
		kong.Description("Drive signed webhooks at hookbridge and measure throughput, latency and exactly-once counts."),
		kong.UsageOnError(),
		kong.Vars{
			"default_batch_size":  strconv.Itoa(engine.DefaultBatchSize),
			"default_concurrency": strconv.Itoa(engine.DefaultConcurrency),
			"default_sync":        app.DefaultEmbeddedSync.String(),
		},
	}, options...)...)
}

// BenchCmd drives load at hookbridge and measures it; see
// docs/PERFORMANCE.md.
type BenchCmd struct {
	Mode string `help:"What to measure: pipeline (webhooks through hookbridge, end to end, with the exactly-once count check), ingress (in-process, ingress role only), floor (a bare HTTP→publish server), publish-sync, publish-async (raw JetStream), pg-insert (raw Postgres single-row commits), drain (consumer apply throughput on a backlog), suite (all of them, repeated, with ratios and targets), external (hookbridge serve with the default configuration and a nats-server, each in a process of its own, against the floor and raw commits, repeated; --soak runs it at a steady rate and samples both processes' memory) cluster (several hookbridge serve processes on one nats-server and one database, under the faults asked for, with order, exactly-once and dead letters counted from the database; see the cluster flags) or delivery (hookbridge serve processes with the relay and delivery roles, an outbox the bench fills and receivers it runs: throughput against a bare HTTP client, isolation of a failing and a slow endpoint, order across a SIGKILL, and an outage of the receiver; see the delivery flags). nats-server runs only the server the external modes start." enum:"pipeline,ingress,floor,publish-sync,publish-async,pg-insert,drain,suite,external,cluster,delivery,nats-server" default:"pipeline"`

	URL    string `help:"Base URL of a running hookbridge (pipeline mode). Empty starts one in-process with an embedded JetStream in a temporary directory and a fresh database created on --database-url's server and dropped afterwards."`
	Secret string `help:"Signing secret of --source (with --url; default: the source's configured secret)."`
	Source string `help:"Source to send as (with --url)." default:"demo"`
	NoDB   bool   `name:"no-db" help:"With --url: do not connect to the database (no end-to-end latency, no count check)."`
	RSSPID int    `name:"rss-pid" help:"With --url: sample the resident set of this process (the hookbridge under test, on this machine) during the run."`

	Concurrency int           `help:"Requests in flight (and sync publishers)." default:"32"`
	Total       int           `help:"Events to send." default:"10000"`
	Rate        float64       `help:"Events per second (open loop; latency counts from the scheduled send). 0 sends as fast as --concurrency allows."`
	Ordering    bool          `help:"External mode: also run, each round, the demo source without its ordering key and with 1, 4 and 16 partitions, and report applied/s of each against the default (keyed, stream.DefaultPartitions)."`
	PaidEvery   int           `name:"paid-every" help:"Make every N-th event an order.paid of an order already created and answered (5: 800 order.created and 200 order.paid per 1,000 events). 0: order.created only."`
	PaidFirst   bool          `name:"paid-first" help:"With --paid-every: send each order.paid just before its order's order.created (out of order, as some senders do); the demo handler postpones it until the order exists."`
	Poll        time.Duration `help:"Inbox poll interval for the end-to-end latency." default:"2ms"`

	BatchSize           int           `name:"batch-size" help:"In-process consumer batch size (0: hookbridge's default, ${default_batch_size})."`
	BatchWait           time.Duration `name:"batch-wait" help:"In-process consumer batch wait (0: hookbridge's default)."`
	ConsumerConcurrency int           `name:"consumer-concurrency" help:"In-process consumer concurrency (0: hookbridge's default, ${default_concurrency})."`
	Roles               []string      `help:"In-process roles for pipeline mode." default:"all" enum:"ingress,consumer,relay,all"`
	SyncInterval        string        `name:"sync-interval" help:"In-process modes: the embedded JetStream server's fsync setting, always or a duration (2m is nats-server's own default). Empty: the configuration's, else hookbridge's default (${default_sync})."`
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
	Hookbridge string        `help:"External modes: the hookbridge binary that runs serve (default: built from this module with go build into a temporary directory)." type:"path"`

	JSON       bool   `name:"json" help:"Print the result as JSON instead of a table."`
	CPUProfile string `name:"cpu-profile" help:"Write a CPU profile of the whole process (load generator and in-process hookbridge) to this file." type:"path"`
	MemProfile string `name:"mem-profile" help:"Pipeline mode: write a heap profile of the whole process to this file once every event was applied, before the in-process hookbridge stops." type:"path"`

	ClusterFlags  `embed:""`
	DeliveryFlags `embed:""`
}

// Run implements the bench command.
func (c *BenchCmd) Run(ctx context.Context, g *cli.Globals, rt *runtime) error {
	cfg, err := g.Load(rt.env, rt.handlers)
	if err != nil {
		return err
	}
	if c.SyncInterval != "" {
		v, err := app.ParseSyncInterval(c.SyncInterval)
		if err != nil {
			return fmt.Errorf("bench: --sync-interval %w", err)
		}
		cfg.EmbeddedNATS.SyncInterval = v
	}
	if c.Total <= 0 || c.Concurrency <= 0 {
		return errors.New("bench: --total and --concurrency must be positive")
	}
	if c.CPUProfile != "" {
		stop, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	progress := rt.stderr
	if c.QuietBelow > 0 && c.Mode != "suite" {
		busy, err := loadgen.WaitQuiet(ctx, c.QuietBelow, c.QuietMaxWait)
		if err != nil {
			return err
		}
		fmt.Fprintf(progress, "bench: machine %.0f%% busy before the run\n", 100*busy)
	}
	// The modes that start something of their own fail on it before they
	// have a result to print.
	switch c.Mode {
	case "nats-server":
		if c.NATSStore == "" {
			return errors.New("bench: --mode nats-server needs --nats-store")
		}
		return loadgen.ServeNATS(ctx, c.NATSStore, cfg.NATSMaxPayload(), rt.stdout)
	case "floor":
		f, err := loadgen.StartFloor(ctx)
		if err != nil {
			return err
		}
		out, err := c.runFloor(ctx, f, progress)
		return c.finish(out, err, rt.stdout)
	case "external", "cluster", "delivery":
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find the hookbridge-bench binary: %w", err)
		}
		exe, cleanup, err := c.hookbridgeBinary(ctx, progress)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer cleanup()
		if c.Mode == "delivery" {
			out, err := orNil(loadgen.Delivery(ctx, c.deliveryOptions(exe, self, cfg.PoolURL(), progress)))
			return c.finish(out, err, rt.stdout)
		}
		if c.Mode == "cluster" {
			out, err := orNil(loadgen.Cluster(ctx, c.clusterOptions(exe, self, cfg.PoolURL(), progress)))
			return c.finish(out, err, rt.stdout)
		}
		out, err := c.runExternal(ctx, exe, self, cfg.PoolURL(), progress)
		return c.finish(out, err, rt.stdout)
	}
	out, err := c.measure(ctx, cfg, rt)
	return c.finish(out, err, rt.stdout)
}

// startCPUProfile profiles the whole process into the file at path until
// stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// printer is what a mode measured.
type printer interface{ Print(io.Writer) }

// orNil is v and err, with v as a nil printer when it is a nil pointer,
// so that nothing is printed for it.
func orNil[T printer](v T, err error) (printer, error) {
	if isNil(v) {
		return nil, err
	}
	return v, err
}

// measure runs the modes that load an in-process hookbridge, the floor's
// parts or Postgres.
func (c *BenchCmd) measure(ctx context.Context, cfg app.Config, rt *runtime) (printer, error) {
	consumer := loadgen.ConsumerSettings{BatchSize: c.BatchSize, BatchWait: c.BatchWait, Concurrency: c.ConsumerConcurrency}
	factory := loadgen.AppFactory(cfg.PoolURL(), cfg, rt.handlers, c.ServerLogLevel, rt.stderr)
	adminURL := cfg.PoolURL()
	progress := rt.stderr
	var t loadgen.Throughput
	var err error
	switch c.Mode {
	case "pipeline":
		if c.URL != "" {
			return orNil(c.external(ctx, cfg, progress))
		}
		return orNil(loadgen.InProcess(ctx, factory, consumer, c.Roles, c.loadOptions(progress)))
	case "ingress":
		return orNil(loadgen.InProcess(ctx, factory, consumer, []string{app.RoleIngress}, c.loadOptions(progress)))
	case "publish-sync":
		t, err = loadgen.RawPublishSync(ctx, c.Total, c.Concurrency)
	case "publish-async":
		t, err = loadgen.RawPublishAsync(ctx, c.Total, c.Window)
	case "pg-insert":
		n := c.PGConcurrency
		if n <= 0 {
			n = max(c.ConsumerConcurrency, 4)
		}
		t, err = loadgen.RawInsert(ctx, adminURL, c.Total, n)
	case "drain":
		d, err := loadgen.Drain(ctx, factory, consumer, c.Total, c.Concurrency, progress)
		if d == nil {
			return nil, err
		}
		if err == nil && !d.Check.OK {
			err = errors.New("bench: the exactly-once count check failed")
		}
		return drainResult{d}, err
	case "suite":
		return orNil(loadgen.RunSuite(ctx, loadgen.SuiteOptions{
			Factory: factory, AdminURL: adminURL, Stages: c.Stages, Repeat: c.Repeat,
			Concurrency: c.Concurrency, Total: c.Total, AsyncWindow: c.Window,
			PGConcurrency: c.PGConcurrency, PGTotal: c.Total / 2, DrainTotal: c.Total, E2ETotal: c.Total,
			Consumer: consumer, Batches: c.Batches, E2EBatch: c.E2EBatch, PollInterval: c.Poll, Progress: progress,
			QuietBelow: c.QuietBelow, QuietMaxWait: c.QuietMaxWait,
		}))
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return throughput(t), nil
}

// runFloor loads the bare HTTP→publish server f, then closes it.
func (c *BenchCmd) runFloor(ctx context.Context, f *loadgen.Floor, progress io.Writer) (printer, error) {
	o := c.loadOptions(progress)
	o.URL, o.Secret, o.Check = f.URL, app.DevSecret, false
	r, err := loadgen.Load(ctx, o)
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return orNil(r, err)
}

// runExternal runs the external rounds, or with --soak the soak, with
// serve run by exe and nats-server by self.
func (c *BenchCmd) runExternal(ctx context.Context, exe, self, adminURL string, progress io.Writer) (printer, error) {
	if c.Soak > 0 {
		return orNil(loadgen.Soak(ctx, c.soakOptions(exe, self, adminURL, progress)))
	}
	return orNil(loadgen.RunExternal(ctx, c.externalOptions(exe, self, adminURL, progress)))
}

// soakOptions are the options of --soak: the load's flags carried as the
// external rounds carry them.
func (c *BenchCmd) soakOptions(exe, self, adminURL string, progress io.Writer) loadgen.SoakOptions {
	return loadgen.SoakOptions{Exe: exe, NATSExe: self, AdminURL: adminURL, Duration: c.Soak, Rate: c.Rate,
		Concurrency: c.Concurrency, Sample: c.SoakSample, PaidEvery: c.PaidEvery, PaidFirst: c.PaidFirst, Progress: progress}
}

// externalOptions are the options of the external rounds.
func (c *BenchCmd) externalOptions(exe, self, adminURL string, progress io.Writer) loadgen.ExternalOptions {
	return loadgen.ExternalOptions{Exe: exe, NATSExe: self, AdminURL: adminURL, Rounds: c.Repeat,
		Concurrency: c.Concurrency, Total: c.Total, PGConcurrency: c.PGConcurrency, PaidEvery: c.PaidEvery, PaidFirst: c.PaidFirst,
		Ordering: c.Ordering, Progress: progress}
}

// finish prints out (as JSON with --json) and returns the command's
// error: the run's, or a failed check or refused events in its result.
func (c *BenchCmd) finish(out printer, err error, stdout io.Writer) error {
	if out != nil && !isNil(out) {
		if c.JSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if encErr := enc.Encode(unwrap(out)); encErr != nil && err == nil {
				err = encErr
			}
		} else {
			out.Print(stdout)
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
		Source: c.Source, Concurrency: c.Concurrency, Total: c.Total, Rate: c.Rate, PaidEvery: c.PaidEvery, PaidFirst: c.PaidFirst,
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
		o.Events = loadgen.NATSEvents(nc)
	}
	for _, cc := range cfg.Consumers {
		if cc.Handler == "orders" {
			o.Consumer = cc.Name
			break
		}
	}
	return loadgen.Load(ctx, o)
}

// hookbridgeBinary is --hookbridge, or the product binary built from this
// module into a temporary directory that cleanup removes: the external
// modes measure serve as the product runs it, in a process of its own.
func (c *BenchCmd) hookbridgeBinary(ctx context.Context, progress io.Writer) (exe string, cleanup func(), err error) {
	if c.Hookbridge != "" {
		return c.Hookbridge, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "hookbridge-bench-bin-")
	if err != nil {
		return "", nil, err
	}
	exe = filepath.Join(dir, "hookbridge")
	fmt.Fprintln(progress, "bench: building hookbridge (pass --hookbridge to use a built one)")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", exe, "github.com/hookbridge/hookbridge/cmd/hookbridge").CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build hookbridge: %w\n%s", err, out)
	}
	return exe, func() { _ = os.RemoveAll(dir) }, nil
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
	case *loadgen.ClusterResult:
		return x == nil
	case *loadgen.DeliveryResult:
		return x == nil
	}
	return false
}

// ClusterFlags are --mode cluster's own flags; --concurrency, --rate,
// --paid-first and --paid-every serve it too.
type ClusterFlags struct {
	Instances    int           `help:"Cluster: hookbridge serve processes, all roles, on one nats-server and one database." default:"2"`
	Accounts     int           `help:"Cluster: accounts of the ledger source (keyed), each sent --versions versions in order: a version only once the one before was answered 2xx." default:"400"`
	Versions     int           `help:"Cluster: versions per account." default:"10"`
	Orders       int           `help:"Cluster: demo orders, each an order.created and an order.paid (0: half the accounts, -1: none); with --paid-first, one order in --paid-every (default 5) has its order.paid sent before its order.created."`
	KillAt       float64       `name:"kill-at" help:"Cluster: SIGKILL the last instance once this share of the events was answered 2xx (0.4), and start it again at --restart-at."`
	RestartAt    float64       `name:"restart-at" help:"Cluster: the share of the events answered 2xx at which the killed instance starts again (0: at once, after --restart-delay)."`
	RestartDelay time.Duration `name:"restart-delay" help:"Cluster: the least time between the kill and the restart."`
	Rolling      bool          `help:"Cluster: stop (SIGTERM) and restart each instance in turn during the run."`
	FailKeys     int           `name:"fail-keys" help:"Cluster: this many accounts fail every apply (the ledger's statement raises) until --fail-for after the first send, and heal by retry."`
	FailFor      time.Duration `name:"fail-for" help:"Cluster: how long the --fail-keys accounts fail." default:"10s"`
	Replay       bool          `help:"Cluster: run hookbridge replay --consumer ledger --since 1h against the running instances once half the events were answered."`
	UnkeyAfter   bool          `name:"unkey-after" help:"Cluster: change the configuration between two runs: the ingress role only for the second half of the events (a backlog is left), then every instance stopped and started with all roles and ordering_key: none."`
	AckWait      time.Duration `name:"ack-wait" help:"Cluster: the consumers' ack_wait (0: hookbridge's default)."`
	Settle       time.Duration `help:"Cluster: stop waiting for the applies when none came for this long." default:"2m"`
}

// clusterOptions are the cluster run's options, with serve run by exe
// and nats-server by self.
func (c *BenchCmd) clusterOptions(exe, self, adminURL string, progress io.Writer) loadgen.ClusterOptions {
	f := c.ClusterFlags
	return loadgen.ClusterOptions{Exe: exe, NATSExe: self, AdminURL: adminURL, Instances: f.Instances, Accounts: f.Accounts,
		Versions: f.Versions, Orders: f.Orders, Concurrency: c.Concurrency, Rate: c.Rate, KillAt: f.KillAt, RestartAt: f.RestartAt,
		RestartDelay: f.RestartDelay, Rolling: f.Rolling, FailKeys: f.FailKeys, FailFor: f.FailFor, PaidFirst: c.PaidFirst,
		PaidEvery: c.PaidEvery, Replay: f.Replay, UnkeyAfter: f.UnkeyAfter, AckWait: f.AckWait, Settle: f.Settle, Progress: progress}
}

// DeliveryFlags are --mode delivery's own flags. The defaults keep a run
// of every scenario within a few minutes plus --outage.
type DeliveryFlags struct {
	Scenarios        []string        `name:"delivery-scenarios" help:"Delivery: the scenarios to run, in this order." default:"throughput,isolation,order,outage" enum:"throughput,isolation,order,outage"`
	Concurrency      int             `name:"delivery-concurrency" help:"Delivery: every endpoint's concurrency, and the floor's posts in flight." default:"16"`
	Timeout          time.Duration   `name:"delivery-timeout" help:"Delivery: every endpoint's timeout; the lease a killed instance holds is this plus 10s." default:"5s"`
	Retry            []time.Duration `name:"delivery-retry" help:"Delivery: every endpoint's retry schedule, the first step 0s (empty: hookbridge's default, whose third step is 5m)."`
	Rate             float64         `name:"delivery-rate" help:"Delivery: events per second the isolation, order and outage scenarios enqueue." default:"100"`
	Events           int             `name:"delivery-events" help:"Delivery throughput: events relayed to EVENTS before the delivery instance starts." default:"5000"`
	MinRatio         float64         `name:"delivery-min-ratio" help:"Delivery throughput: the promise, deliveries/s at least this share of the bare client's posts/s." default:"0.8"`
	Endpoints        int             `name:"delivery-endpoints" help:"Delivery isolation: endpoints, one answering 503 and one slow." default:"100"`
	PerEndpoint      int             `name:"delivery-per-endpoint" help:"Delivery isolation: events per endpoint." default:"10"`
	SlowFor          time.Duration   `name:"delivery-slow-for" help:"Delivery isolation: how long the slow endpoint takes to answer." default:"2s"`
	MaxP99Ratio      float64         `name:"delivery-max-p99-ratio" help:"Delivery isolation: the promise, the healthy endpoints' p99 at most this multiple of the run without the bad two." default:"1.5"`
	Instances        int             `name:"delivery-instances" help:"Delivery order: serve instances; the last is SIGKILLed." default:"2"`
	OrderedEndpoints int             `name:"delivery-ordered-endpoints" help:"Delivery order: ordered endpoints, all sent the same events." default:"2"`
	Keys             int             `name:"delivery-keys" help:"Delivery order: keys." default:"20"`
	Versions         int             `name:"delivery-versions" help:"Delivery order: events per key." default:"20"`
	KillAt           float64         `name:"delivery-kill-at" help:"Delivery order: the share of the deliveries at which the last instance is SIGKILLed." default:"0.4"`
	Outage           time.Duration   `help:"Delivery outage: how long the receiver is down, under load from a quarter of this before to a quarter after." default:"2m"`
	Settle           time.Duration   `name:"delivery-settle" help:"Delivery: stop waiting for deliveries when none arrived for this long (the retry schedule's step after the outage must fit)." default:"6m"`
}

// deliveryOptions are the delivery run's options, with serve run by exe
// and nats-server by self.
func (c *BenchCmd) deliveryOptions(exe, self, adminURL string, progress io.Writer) loadgen.DeliveryOptions {
	f := c.DeliveryFlags
	return loadgen.DeliveryOptions{Exe: exe, NATSExe: self, AdminURL: adminURL, Scenarios: f.Scenarios, Concurrency: f.Concurrency,
		Timeout: f.Timeout, Retry: f.Retry, Rate: f.Rate, Events: f.Events, MinRatio: f.MinRatio, Endpoints: f.Endpoints,
		PerEndpoint: f.PerEndpoint, SlowFor: f.SlowFor, MaxP99Ratio: f.MaxP99Ratio, Instances: f.Instances,
		OrderedEndpoints: f.OrderedEndpoints, Keys: f.Keys, Versions: f.Versions, KillAt: f.KillAt, Outage: f.Outage,
		Settle: f.Settle, Progress: progress}
}
