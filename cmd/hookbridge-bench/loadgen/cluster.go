package loadgen

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/hookbridge/hookbridge/internal/pgtemp"
)

// ClusterOptions configure [Cluster]: a black-box run of what users
// deploy — several `hookbridge serve` processes with all roles on one
// nats-server and one fresh database — under faults, counted from the
// database afterwards.
type ClusterOptions struct {
	// Exe is the hookbridge binary (serve, replay); NATSExe the load
	// tool's (--mode nats-server).
	Exe      string
	NATSExe  string
	AdminURL string
	// Instances is how many serve processes run (default 2).
	Instances int
	// Accounts × Versions ledger events are sent (default 400 × 10), and
	// Orders demo orders, each an order.created and an order.paid (default
	// Accounts/2).
	Accounts int
	Versions int
	Orders   int
	// Concurrency is the requests in flight at most (default 32); Rate,
	// when > 0, the events per second (else closed loop).
	Concurrency int
	Rate        float64
	// KillAt, when > 0, SIGKILLs the last instance once this share of the
	// events was answered 2xx, and restarts it once RestartAt was (0: at
	// once) and RestartDelay has passed since the kill.
	KillAt       float64
	RestartAt    float64
	RestartDelay time.Duration
	// Rolling stops (SIGTERM) and restarts each instance in turn, instance
	// i once (i+1)/(Instances+1) of the events were answered.
	Rolling bool
	// FailKeys accounts fail every apply (a block row makes the ledger's
	// statement raise) from the start until FailFor (default 10s) after
	// the first send.
	FailKeys int
	FailFor  time.Duration
	// PaidFirst sends the order.paid of one order in PaidEvery (default 5)
	// before its order.created.
	PaidFirst bool
	PaidEvery int
	// Replay runs `hookbridge replay --consumer ledger --since 1h` once
	// half the events were answered, while the instances run.
	Replay bool
	// UnkeyAfter changes the configuration between two runs: the
	// instances serve all roles with the ordering keys until half the
	// events were answered, then the ingress role only, so that a backlog
	// is left; once all are sent they stop, and all start again with all
	// roles and ordering_key: none on both sources.
	UnkeyAfter bool
	// AckWait is the consumers' ack_wait (0: hookbridge's default).
	AckWait time.Duration
	// Settle ends the wait for the applies when none came for this long
	// (default 2 minutes: a member's death holds its keys for ack_wait,
	// 30 s by default, after its pin lapses).
	Settle   time.Duration
	Progress io.Writer
}

func (o *ClusterOptions) setDefaults() error {
	if o.Exe == "" || o.NATSExe == "" {
		return errors.New("loadgen: cluster: no hookbridge or hookbridge-bench binary")
	}
	if o.Instances <= 0 {
		o.Instances = 2
	}
	if o.Accounts <= 0 {
		o.Accounts = 400
	}
	if o.Versions <= 0 {
		o.Versions = 10
	}
	if o.Orders < 0 {
		o.Orders = 0
	} else if o.Orders == 0 {
		o.Orders = o.Accounts / 2
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.PaidEvery <= 0 {
		o.PaidEvery = 5
	}
	if o.FailKeys > 0 && o.FailFor <= 0 {
		o.FailFor = 10 * time.Second
	}
	if o.FailKeys > o.Accounts {
		return fmt.Errorf("loadgen: cluster: --fail-keys %d is more than the %d accounts", o.FailKeys, o.Accounts)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--kill-at", o.KillAt}, {"--restart-at", o.RestartAt}} {
		if f.v < 0 || f.v >= 1 {
			return fmt.Errorf("loadgen: cluster: %s %g: a share of the events, at least 0 and below 1", f.name, f.v)
		}
	}
	if o.RestartAt > 0 && o.RestartAt <= o.KillAt {
		return fmt.Errorf("loadgen: cluster: --restart-at %g must come after --kill-at %g", o.RestartAt, o.KillAt)
	}
	if o.KillAt > 0 && o.RestartAt > 0 && o.Instances < 2 {
		return errors.New("loadgen: cluster: with one instance nothing is answered while it is down, so --restart-at is never reached; use --restart-delay")
	}
	if o.Settle <= 0 {
		o.Settle = 2 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	// The sending, the faults and the progress line write to it at once.
	o.Progress = &syncWriter{w: o.Progress}
	return nil
}

// syncWriter serialises the writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// ClusterResult is a cluster run's report. Every count is read from the
// database once the applies stopped.
type ClusterResult struct {
	RunID       string  `json:"run_id"`
	Instances   int     `json:"instances"`
	Accounts    int     `json:"accounts"`
	Versions    int     `json:"versions"`
	Orders      int     `json:"orders"`
	Rate        float64 `json:"rate,omitempty"`
	Concurrency int     `json:"concurrency"`
	PaidFirst   bool    `json:"paid_first,omitempty"`

	// Events is how many the run had to send; Sent how many were sent,
	// Answered2xx how many were answered 2xx (Duplicates of them 200: a
	// retry found the event stored).
	Events      int `json:"events"`
	Sent        int `json:"sent"`
	Answered2xx int `json:"answered_2xx"`
	Duplicates  int `json:"duplicates"`
	// Requests counts every attempt; Answered503 and NetworkErrors the
	// attempts that failed so and were retried on the next instance.
	// AnsweredPerSecond is the events answered 2xx over first send →
	// last 2xx: the rate reached, which --rate bounds.
	AnsweredPerSecond float64        `json:"answered_per_s"`
	Requests          int            `json:"requests"`
	Answered503       int            `json:"answered_503"`
	NetworkErrors     int            `json:"network_errors"`
	Statuses          map[string]int `json:"statuses"`
	NotAccepted       int            `json:"not_accepted"`

	// Applied is the inbox rows of the run's events (both consumers).
	Applied int `json:"applied"`
	// AppliedTwice counts ledger versions applied more than once and
	// orders changed more than twice; OutOfOrder the first applies of a
	// version that did not see the version before it; StaleAccounts the
	// accounts whose final version is not the last one sent.
	AppliedTwice  int `json:"applied_twice"`
	OutOfOrder    int `json:"out_of_order"`
	StaleAccounts int `json:"stale_accounts"`
	DeadLetters   int `json:"dead_letters"`
	// OrdersNotPaid counts orders not paid by exactly one change
	// (status paid, version 2).
	OrdersNotPaid int `json:"orders_not_paid"`
	// LastAckToLastApplySeconds is from the last 2xx to the last apply;
	// AppliedPerSecond the applied events over first send → last apply.
	LastAckToLastApplySeconds float64 `json:"last_2xx_to_last_apply_s"`
	AppliedPerSecond          float64 `json:"applied_per_s"`
	// Backlog is, with UnkeyAfter, the events answered 2xx and not applied
	// when the instances stopped for the configuration change.
	Backlog *int `json:"backlog_at_change,omitempty"`
	// Replay is the mid-run replay's summary, with Replay.
	Replay *ClusterReplay `json:"replay,omitempty"`
	// Timeline lists the faults as they happened.
	Timeline []ClusterStep `json:"timeline"`
	// Logs is the directory kept with every process's log when the run
	// broke a promise or failed.
	Logs     string   `json:"logs,omitempty"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems,omitempty"`
}

// ClusterStep is one fault of the run, when it happened.
type ClusterStep struct {
	AtSeconds float64 `json:"at_s"`
	// Answered is the share of the events answered 2xx by then.
	Answered float64 `json:"answered"`
	What     string  `json:"what"`
}

// ClusterReplay is what `hookbridge replay` reported.
type ClusterReplay struct {
	ExitCode  int     `json:"exit_code"`
	Seconds   float64 `json:"seconds"`
	Selected  int     `json:"selected"`
	Processed int     `json:"processed"`
	Duplicate int     `json:"duplicate"`
	Held      int     `json:"held"`
	Failed    int     `json:"failed"`
}

// cluster is a run in progress.
type cluster struct {
	o         ClusterOptions
	runID     string
	dir       string
	nats      *process
	natsURL   string
	db        *pgtemp.Database
	pool      *pgxpool.Pool
	secrets   map[string]string
	config    string // the keyed configuration's file
	instances []*clusterInstance
	sender    *clusterSender
	prog      *progress
	start     time.Time

	mu       sync.Mutex
	timeline []ClusterStep
	faultErr error
	replay   *ClusterReplay
}

// Cluster runs the black-box cluster check and returns its report; the
// error says why the run could not be carried out or, with the report,
// which promise it broke.
func Cluster(ctx context.Context, o ClusterOptions) (*ClusterResult, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	c := &cluster{o: o, runID: "cl-" + pgtemp.RandomHex(4), secrets: map[string]string{}}
	res, err := c.run(ctx)
	keep := err != nil || (res != nil && !res.OK)
	if cerr := c.close(keep); cerr != nil {
		err = errors.Join(err, cerr)
		keep = true
	}
	if keep && c.dir != "" && res != nil {
		res.Logs = c.dir
	}
	if err == nil && !res.OK {
		err = fmt.Errorf("cluster: %d promise(s) broken", len(res.Problems))
	}
	return res, err
}

// setUp starts nats-server, creates the database, writes the keyed
// configuration and starts the instances one after the other (the first
// migrates the database).
func (c *cluster) setUp(ctx context.Context) error {
	var err error
	if c.dir, err = os.MkdirTemp("", "hookbridge-bench-cluster-"); err != nil {
		return err
	}
	if c.nats, c.natsURL, err = startNATSProcess(ctx, c.o.NATSExe, c.dir); err != nil {
		return err
	}
	if c.db, err = pgtemp.Create(ctx, c.o.AdminURL, "hookbridge_bench_cluster", ""); err != nil {
		return err
	}
	for _, s := range []string{demoSource, ledgerSource} {
		key := make([]byte, 24)
		_, _ = rand.Read(key)
		c.secrets[s] = "whsec_" + base64.StdEncoding.EncodeToString(key)
	}
	if c.config, err = (clusterConfig{secrets: c.secrets, ackWait: c.o.AckWait}).write(c.dir, "hookbridge.yaml"); err != nil {
		return err
	}
	for i := range c.o.Instances {
		in, err := newClusterInstance(fmt.Sprintf("hb%d", i+1), c.dir, c.natsURL, c.db.URL, c.config)
		if err != nil {
			return err
		}
		c.instances = append(c.instances, in)
		if err := in.start(ctx, c.o.Exe); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.o.Progress, "cluster: %d instances of hookbridge serve on one nats-server and database %s\n", len(c.instances), c.db.Name)
	c.pool, err = openPool(ctx, c.db.URL)
	return err
}

// close stops every process and drops the database; with keep, or when
// a process did not stop cleanly, the directory with the logs stays.
func (c *cluster) close(keep bool) error {
	var errs []error
	for _, in := range c.instances {
		errs = append(errs, in.stop())
	}
	if c.pool != nil {
		c.pool.Close()
	}
	if c.nats != nil {
		errs = append(errs, c.nats.stop(10*time.Second))
	}
	if c.db != nil {
		errs = append(errs, c.db.Drop())
	}
	err := errors.Join(errs...)
	if err != nil || keep || c.dir == "" {
		return err
	}
	return os.RemoveAll(c.dir)
}

// step records a fault in the timeline and on the progress output.
func (c *cluster) step(format string, args ...any) {
	s := ClusterStep{AtSeconds: time.Since(c.start).Seconds(), What: fmt.Sprintf(format, args...)}
	if c.prog != nil {
		s.Answered = float64(c.prog.answered()) / float64(c.prog.total)
	}
	c.mu.Lock()
	c.timeline = append(c.timeline, s)
	c.mu.Unlock()
	fmt.Fprintf(c.o.Progress, "cluster %5.1fs %3.0f%%: %s\n", s.AtSeconds, 100*s.Answered, s.What)
}

// fail records a fault that could not be carried out: the run is not the
// one asked for.
func (c *cluster) fail(err error) {
	c.mu.Lock()
	c.faultErr = errors.Join(c.faultErr, err)
	c.mu.Unlock()
	c.step("failed: %v", err)
}

func (c *cluster) run(ctx context.Context) (*ClusterResult, error) {
	if err := c.setUp(ctx); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// The timeline counts from here: the processes are up.
	c.start = time.Now()
	entities := c.entities()
	total := 0
	for _, e := range entities {
		total += e.n
	}
	c.prog = newProgress(total)
	urls := make([]string, len(c.instances))
	for i, in := range c.instances {
		urls[i] = in.url
	}
	c.sender = &clusterSender{urls: urls, secrets: c.secrets, client: NewClient(c.o.Concurrency), prog: c.prog, log: c.o.Progress}
	if c.o.Rate > 0 {
		c.sender.limiter = rate.NewLimiter(rate.Limit(c.o.Rate), 1)
	}
	if c.o.UnkeyAfter {
		// The second half goes to ingress-only instances: the sending
		// waits while they restart, so that none of it is applied before
		// the configuration changes.
		c.sender.pause = &pause{at: (total + 1) / 2, resume: make(chan struct{})}
	}
	if c.o.FailKeys > 0 {
		if err := c.block(ctx); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}

	c.sender.firstSend = time.Now() // the blocks' time counts from here
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	var faults, reporter sync.WaitGroup
	for _, f := range c.faults() {
		faults.Go(func() { f(faultCtx) })
	}
	reportCtx, stopReport := context.WithCancel(ctx)
	reporter.Go(func() { c.report(reportCtx) })
	c.step("sending %d events, %d in flight at most", total, c.o.Concurrency)
	c.sender.run(ctx, entities, c.o.Concurrency)
	c.step("sent: %d of %d answered 2xx", c.prog.answered(), total)
	faults.Wait()
	if ctx.Err() != nil {
		stopReport()
		reporter.Wait()
		return nil, ctx.Err()
	}
	var backlog *int
	if c.o.UnkeyAfter {
		n, err := c.unkey(ctx)
		if err != nil {
			c.fail(err)
		}
		backlog = &n
	}
	settled, err := c.settle(ctx)
	stopReport()
	reporter.Wait()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	counts, err := countCluster(ctx, c.pool, c.runID, c.o.Versions)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	res := c.result(total, counts)
	res.Backlog = backlog
	if !settled {
		res.Problems = append(res.Problems, fmt.Sprintf("no apply for %s before every event answered 2xx was applied", c.o.Settle))
		res.OK = false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res.Timeline, res.Replay = c.timeline, c.replay
	if c.faultErr != nil {
		return res, fmt.Errorf("cluster: a fault could not be carried out: %w", c.faultErr)
	}
	return res, nil
}

// entities are the accounts and the orders, interleaved.
func (c *cluster) entities() []*entity {
	var out []*entity
	for i := range max(c.o.Accounts, c.o.Orders) {
		if i < c.o.Accounts {
			out = append(out, ledgerEntity(c.runID, i, c.o.Versions))
		}
		if i < c.o.Orders {
			out = append(out, orderEntity(c.runID, i, c.o.PaidFirst && i%c.o.PaidEvery == c.o.PaidEvery-1))
		}
	}
	return out
}

// block makes the first FailKeys accounts fail.
func (c *cluster) block(ctx context.Context) error {
	accounts := make([]string, c.o.FailKeys)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("%s-a%d", c.runID, i)
	}
	if _, err := c.pool.Exec(ctx, `INSERT INTO ledger.blocks (account) SELECT unnest($1::text[])`, accounts); err != nil {
		return fmt.Errorf("block %d accounts: %w", len(accounts), err)
	}
	c.step("%d accounts fail every apply until %s after the first send", len(accounts), c.o.FailFor)
	return nil
}

// faults are the faults asked for, each run in a goroutine of its own
// alongside the sending.
func (c *cluster) faults() []func(context.Context) {
	var fs []func(context.Context)
	if c.o.KillAt > 0 {
		fs = append(fs, c.killAndRestart)
	}
	if c.o.Rolling {
		fs = append(fs, c.rolling)
	}
	if c.o.FailKeys > 0 {
		fs = append(fs, c.lift)
	}
	if c.o.Replay {
		fs = append(fs, c.runReplay)
	}
	if c.o.UnkeyAfter {
		fs = append(fs, c.ingressOnly)
	}
	return fs
}

// killAndRestart SIGKILLs the last instance at KillAt and starts it again
// at RestartAt, no sooner than RestartDelay after the kill.
func (c *cluster) killAndRestart(ctx context.Context) {
	if !c.prog.await(ctx, c.o.KillAt) {
		c.step("kill not made: the sending ended before %.0f%%", 100*c.o.KillAt)
		return
	}
	in := c.instances[len(c.instances)-1]
	if err := in.kill(); err != nil {
		c.fail(err)
		return
	}
	killed := time.Now()
	c.step("%s killed (SIGKILL)", in.name)
	c.prog.await(ctx, c.o.RestartAt) // the sending may end first: restart then
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(killed.Add(c.o.RestartDelay))):
	}
	c.step("%s starting again", in.name)
	started, err := in.startIfStopped(ctx, c.o.Exe)
	switch {
	case err != nil:
		c.fail(err)
	case started:
		c.step("%s restarted (ready)", in.name)
	default:
		c.step("%s was started again already (a rolling restart)", in.name)
	}
}

// rolling stops and restarts each instance in turn.
func (c *cluster) rolling(ctx context.Context) {
	n := len(c.instances)
	for i, in := range c.instances {
		if !c.prog.await(ctx, float64(i+1)/float64(n+1)) {
			return
		}
		c.step("%s stopping (SIGTERM) for a rolling restart", in.name)
		if err := in.restart(ctx, c.o.Exe, nil); err != nil {
			c.fail(err)
			return
		}
		c.step("%s restarted (ready)", in.name)
	}
}

// lift deletes the block rows FailFor after the first send.
func (c *cluster) lift(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(c.sender.firstSend.Add(c.o.FailFor))):
	}
	if _, err := c.pool.Exec(ctx, `DELETE FROM ledger.blocks WHERE starts_with(account, $1)`, c.runID+"-"); err != nil {
		c.fail(fmt.Errorf("lift the blocks: %w", err))
		return
	}
	c.step("blocks lifted: the failing accounts apply again on their next retry")
}

// runReplay runs `hookbridge replay --consumer ledger --since 1h` against
// the running instances once half the events were answered.
func (c *cluster) runReplay(ctx context.Context) {
	if !c.prog.await(ctx, 0.5) {
		return
	}
	c.step("replay --consumer %s --since 1h started", ledgerConsumer)
	cmd := exec.CommandContext(ctx, c.o.Exe, "replay", "--consumer", ledgerConsumer, "--since", "1h", "--json")
	cmd.Env = cleanEnv([]string{"HOOKBRIDGE_CONFIG=" + c.config, "HOOKBRIDGE_NATS_URL=" + c.natsURL, "HOOKBRIDGE_DATABASE_URL=" + c.db.URL})
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	logFile, err := os.Create(filepath.Join(c.dir, "replay.log"))
	if err != nil {
		c.fail(err)
		return
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	start := time.Now()
	runErr := cmd.Run()
	r := &ClusterReplay{Seconds: time.Since(start).Seconds()}
	var exit *exec.ExitError
	switch {
	case errors.As(runErr, &exit):
		r.ExitCode = exit.ExitCode() // replay exits 1 when an event failed: a blocked account does
	case runErr != nil:
		c.fail(fmt.Errorf("replay: %w", runErr))
		return
	}
	if err := parseReplaySummary(stdout.Bytes(), r); err != nil {
		c.fail(fmt.Errorf("replay (exit %d, log %s): %w", r.ExitCode, logFile.Name(), err))
		return
	}
	c.mu.Lock()
	c.replay = r
	c.mu.Unlock()
	c.step("replay ended (exit %d): %d selected, %d processed, %d duplicate, %d held, %d failed",
		r.ExitCode, r.Selected, r.Processed, r.Duplicate, r.Held, r.Failed)
}

// parseReplaySummary reads the summary line of `replay --json`, its last.
func parseReplaySummary(out []byte, r *ClusterReplay) error {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var last struct {
		Summary *struct {
			Selected  int `json:"selected"`
			Processed int `json:"processed"`
			Duplicate int `json:"duplicate"`
			Held      int `json:"held"`
			Failed    int `json:"failed"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil || last.Summary == nil {
		return fmt.Errorf("no summary in its output (%d bytes): %v", len(out), err)
	}
	s := last.Summary
	r.Selected, r.Processed, r.Duplicate, r.Held, r.Failed = s.Selected, s.Processed, s.Duplicate, s.Held, s.Failed
	return nil
}

// ingressOnly restarts each instance with the ingress role only once half
// the events were answered (the sending waits meanwhile), so that the rest
// is left as a backlog.
func (c *cluster) ingressOnly(ctx context.Context) {
	p := c.sender.pause
	defer close(p.resume) // on a failure too: the run goes on, and reports it
	if !c.prog.await(ctx, float64(p.at)/float64(c.prog.total)) {
		return
	}
	c.step("sending paused for the change to the ingress role only")
	for _, in := range c.instances {
		if err := in.restart(ctx, c.o.Exe, func(in *clusterInstance) { in.roles = []string{"ingress"} }); err != nil {
			c.fail(err)
			return
		}
		c.step("%s restarted with the ingress role only", in.name)
	}
}

// unkey stops every instance, turns both sources' ordering keys off and
// starts them all with all roles; it returns the backlog the change met.
func (c *cluster) unkey(ctx context.Context) (int, error) {
	for _, in := range c.instances {
		if err := in.stop(); err != nil {
			return 0, err
		}
	}
	ledger, orders, err := countApplied(ctx, c.pool, c.runID)
	if err != nil {
		return 0, err
	}
	backlog := c.prog.answered() - ledger - orders
	c.step("all instances stopped with %d events answered 2xx and not applied", backlog)
	config, err := clusterConfig{secrets: c.secrets, unkeyed: true, ackWait: c.o.AckWait}.write(c.dir, "hookbridge-unkeyed.yaml")
	if err != nil {
		return backlog, err
	}
	for _, in := range c.instances {
		in.mu.Lock()
		in.config, in.roles = config, nil
		err := in.startLocked(ctx, c.o.Exe)
		in.mu.Unlock()
		if err != nil {
			return backlog, err
		}
	}
	c.step("all instances started with all roles and ordering_key: none")
	return backlog, nil
}

// settle waits until every event answered 2xx was applied (true), or no
// apply came for Settle (false).
func (c *cluster) settle(ctx context.Context) (bool, error) {
	want := c.prog.answered()
	last, since := -1, time.Now()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		ledger, orders, err := countApplied(ctx, c.pool, c.runID)
		if err != nil {
			return false, err
		}
		n := ledger + orders
		if n >= want {
			return true, nil
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > c.o.Settle {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// report writes a progress line every second.
func (c *cluster) report(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ledger, orders, err := countApplied(ctx, c.pool, c.runID)
		if err != nil {
			continue // the run's own reads report a lasting failure
		}
		fmt.Fprintf(c.o.Progress, "cluster %5.1fs: %d/%d answered 2xx, %d requests, %d applied\n",
			time.Since(c.start).Seconds(), c.prog.answered(), c.prog.total, c.sender.requests.Load(), ledger+orders)
	}
}

// result builds the report from the sender's figures and the counts.
func (c *cluster) result(total int, k clusterCounts) *ClusterResult {
	s := c.sender
	r := &ClusterResult{
		RunID: c.runID, Instances: c.o.Instances, Accounts: c.o.Accounts, Versions: c.o.Versions, Orders: c.o.Orders,
		Rate: c.o.Rate, Concurrency: c.o.Concurrency, PaidFirst: c.o.PaidFirst,
		Events: total, Sent: int(s.sent.Load()), Answered2xx: c.prog.answered(), Duplicates: int(s.dups.Load()),
		Requests: int(s.requests.Load()), Answered503: int(s.statuses[503].Load()), NetworkErrors: int(s.statuses[0].Load()),
		Statuses: map[string]int{},
	}
	for code := range s.statuses {
		if v := s.statuses[code].Load(); v > 0 {
			name := fmt.Sprint(code)
			if code == 0 {
				name = "network_error"
			}
			r.Statuses[name] = int(v)
		}
	}
	r.NotAccepted = total - r.Answered2xx
	r.Applied = k.LedgerInbox + k.OrdersInbox
	r.AppliedTwice = k.LedgerTwice + k.OrdersChangedTwice
	r.OutOfOrder = k.OutOfOrder
	r.StaleAccounts = c.o.Accounts - k.AccountsAtFinal
	r.DeadLetters = k.DeadLetters
	r.OrdersNotPaid = c.o.Orders - k.OrdersPaid
	if last := s.lastOK.Load(); last > 0 {
		if d := time.Unix(0, last).Sub(s.firstSend).Seconds(); d > 0 {
			r.AnsweredPerSecond = float64(r.Answered2xx) / d
		}
	}
	if last := s.lastOK.Load(); last > 0 && !k.LastApply.IsZero() {
		r.LastAckToLastApplySeconds = k.LastApply.Sub(time.Unix(0, last)).Seconds()
		if d := k.LastApply.Sub(s.firstSend).Seconds(); d > 0 {
			r.AppliedPerSecond = float64(r.Applied) / d
		}
	}
	r.evaluate(k, int(s.accepted[0].Load()), int(s.accepted[1].Load()))
	return r
}

// evaluate lists the broken promises: ledgerAccepted and ordersAccepted
// are the events of each source answered 2xx.
func (r *ClusterResult) evaluate(k clusterCounts, ledgerAccepted, ordersAccepted int) {
	bad := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	if r.NotAccepted > 0 {
		bad("%d event(s) never answered 2xx (with every instance tried for %s)", r.NotAccepted, giveUpAfter)
	}
	if k.LedgerInbox != ledgerAccepted {
		bad("ledger: %d event(s) answered 2xx, %d applied", ledgerAccepted, k.LedgerInbox)
	}
	if k.OrdersInbox != ordersAccepted {
		bad("orders: %d event(s) answered 2xx, %d applied", ordersAccepted, k.OrdersInbox)
	}
	if k.LedgerApplied != k.LedgerInbox {
		bad("ledger: %d inbox rows but %d versions applied", k.LedgerInbox, k.LedgerApplied)
	}
	if r.AppliedTwice > 0 {
		bad("%d applied twice (%d ledger versions, %d orders changed more than twice)", r.AppliedTwice, k.LedgerTwice, k.OrdersChangedTwice)
	}
	if r.OutOfOrder > 0 {
		bad("%d ledger apply(s) out of order", r.OutOfOrder)
	}
	if r.StaleAccounts > 0 {
		bad("%d of %d accounts not at version %d", r.StaleAccounts, r.Accounts, r.Versions)
	}
	if r.DeadLetters > 0 {
		bad("%d dead letter(s)", r.DeadLetters)
	}
	if r.OrdersNotPaid > 0 {
		bad("%d of %d orders not paid at version 2", r.OrdersNotPaid, r.Orders)
	}
	r.OK = len(r.Problems) == 0
}

// Print writes the report.
func (r *ClusterResult) Print(w io.Writer) {
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("%.0f events/s", r.Rate)
	}
	fmt.Fprintf(w, "cluster %s: %d × hookbridge serve (all roles, own processes) on one nats-server and one database; %d accounts × %d versions, %d orders, %s, %d in flight\n\n",
		r.RunID, r.Instances, r.Accounts, r.Versions, r.Orders, mode, r.Concurrency)
	if len(r.Timeline) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range r.Timeline {
			fmt.Fprintf(tw, "%6.1fs\t%3.0f%%\t%s\n", s.AtSeconds, 100*s.Answered, s.What)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, v any) { fmt.Fprintf(tw, "%s\t%v\t\n", name, v) }
	row("events sent", fmt.Sprintf("%d of %d", r.Sent, r.Events))
	row("answered 2xx", fmt.Sprintf("%d (%d of them 200 duplicate), %.0f/s", r.Answered2xx, r.Duplicates, r.AnsweredPerSecond))
	row("requests / answered 503 / network errors", fmt.Sprintf("%d / %d / %d", r.Requests, r.Answered503, r.NetworkErrors))
	if r.Backlog != nil {
		row("backlog at the configuration change", *r.Backlog)
	}
	if r.Replay != nil {
		row("replay: processed / duplicate / held / failed (exit)", fmt.Sprintf("%d / %d / %d / %d (%d)", r.Replay.Processed, r.Replay.Duplicate, r.Replay.Held, r.Replay.Failed, r.Replay.ExitCode))
	}
	row("applied", r.Applied)
	row("applied twice", r.AppliedTwice)
	row("out of order", r.OutOfOrder)
	row("stale accounts", r.StaleAccounts)
	row("dead letters", r.DeadLetters)
	row("orders not paid", r.OrdersNotPaid)
	row("last 2xx → last apply", fmt.Sprintf("%.1f s", r.LastAckToLastApplySeconds))
	row("applied/s (first send → last apply)", fmt.Sprintf("%.0f", r.AppliedPerSecond))
	tw.Flush()
	if r.OK {
		fmt.Fprintln(w, "\nPASS: every event answered 2xx applied once, in order")
	} else {
		fmt.Fprintln(w, "\nFAIL:")
		for _, p := range r.Problems {
			fmt.Fprintln(w, "  -", p)
		}
	}
	if r.Logs != "" {
		fmt.Fprintln(w, "logs:", r.Logs)
	}
}
