package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/pgtemp"
	"github.com/hookbridge/hookbridge/internal/store"
)

// ConsumerSettings are the orders consumer's settings in an in-process
// hookbridge; zero values take hookbridge's defaults.
type ConsumerSettings struct {
	BatchSize   int           `json:"batch_size,omitempty"`
	BatchWait   time.Duration `json:"batch_wait,omitempty"`
	Concurrency int           `json:"concurrency,omitempty"`
}

// Instance is a running hookbridge.
type Instance struct {
	// URL is the base URL of its HTTP server.
	URL string
	// Stop shuts it down (intake first, in-flight work finished) and waits.
	Stop func() error
	// Events, when set, subscribes to what its relay publishes.
	Events EventSource
	// Redelivered, when set, reports how many messages JetStream has
	// redelivered to the orders consumer (a delivery not acked within
	// ack_wait, or nak'd) since it was created.
	Redelivered func(ctx context.Context) (int, error)
}

// Env is a fresh in-process environment: an empty database and an empty
// JetStream store. Instances started in it share both, so one can take
// webhooks in and a later one apply them.
type Env interface {
	// Start runs hookbridge with roles ("ingress", "consumer", "relay",
	// "all") and returns once its HTTP server listens.
	Start(ctx context.Context, roles []string) (*Instance, error)
	// DatabaseURL is the environment's database.
	DatabaseURL() string
	// Secret signs webhooks for source "demo".
	Secret() string
	// Close stops nothing (stop instances first) and removes the database
	// and the store.
	Close() error
}

// EnvFactory creates environments: [AppFactory] runs the app library in
// this process.
type EnvFactory func(ctx context.Context, c ConsumerSettings) (Env, error)

// InProcess runs one load against a fresh in-process hookbridge with all
// roles, and the count check. o.URL, o.Secret and o.DatabaseURL are set
// from the environment. RSS is sampled every 250ms around the run.
func InProcess(ctx context.Context, factory EnvFactory, c ConsumerSettings, roles []string, o Options) (*Result, error) {
	env, err := factory(ctx, c)
	if err != nil {
		return nil, err
	}
	defer env.Close() //nolint:errcheck // best effort cleanup
	inst, err := env.Start(ctx, roles)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = inst.Stop()
		}
	}()
	o.URL, o.Secret, o.DatabaseURL = inst.URL, env.Secret(), env.DatabaseURL()
	if !hasRole(roles, "consumer") {
		o.DatabaseURL, o.Check = "", false
	}
	if hasRole(roles, "relay") && o.Events == nil {
		o.Events = inst.Events
	}
	rss := startRSS(250 * time.Millisecond)
	res, err := Load(ctx, o)
	figures := rss.finish()
	if n := redelivered(ctx, inst); res != nil && hasRole(roles, "consumer") && n >= 0 {
		res.Redelivered = &n
	}
	stopped = true
	if stopErr := inst.Stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("stop hookbridge: %w", stopErr)
	}
	if res != nil {
		res.RSS = &figures
	}
	return res, err
}

// redelivered asks inst, when it can tell; -1 otherwise.
func redelivered(ctx context.Context, inst *Instance) int {
	if inst.Redelivered == nil {
		return -1
	}
	n, err := inst.Redelivered(ctx)
	if err != nil {
		return -1
	}
	return n
}

func hasRole(roles []string, r string) bool {
	for _, x := range roles {
		if x == r || x == "all" {
			return true
		}
	}
	return len(roles) == 0
}

// DrainResult is a consumer throughput measurement.
type DrainResult struct {
	Name      string           `json:"name"`
	Consumer  ConsumerSettings `json:"consumer"`
	Events    int              `json:"events"`
	Seconds   float64          `json:"seconds"`
	PerSecond float64          `json:"events_per_s"`
	// ProcessCPUPerEventUs is this process's CPU (the consumer, the
	// embedded NATS server) per event over the measured window;
	// PostgresCPUPerEventUs the CPU of the database's server backends per
	// event over the consumer's whole run (0 when Postgres is not local).
	ProcessCPUPerEventUs  float64 `json:"process_cpu_per_event_us"`
	PostgresCPUPerEventUs float64 `json:"postgres_cpu_per_event_us"`
	// Redelivered counts JetStream redeliveries to the consumer (-1:
	// unknown); 0 means no buffered message outlived ack_wait.
	Redelivered int    `json:"redelivered"`
	Check       *Check `json:"check"`
}

func (d DrainResult) String() string {
	return fmt.Sprintf("%s: %d events in %.2fs = %.0f events/s (batch %s, concurrency %s; CPU per event: %.0f µs here, %.0f µs in Postgres; %d redelivered); check %s",
		d.Name, d.Events, d.Seconds, d.PerSecond, orDefault(d.Consumer.BatchSize), orDefault(d.Consumer.Concurrency),
		d.ProcessCPUPerEventUs, d.PostgresCPUPerEventUs, d.Redelivered, d.Check)
}

func orDefault(n int) string {
	if n <= 0 {
		return "default"
	}
	return fmt.Sprint(n)
}

// Drain measures consumer apply throughput alone: a hookbridge with the
// ingress role only takes total webhooks into a fresh environment, stops,
// and one with the consumer role only then applies the backlog. The rate
// is counted between the first and the last poll of the inbox count that
// moved, so start-up and the tail of the polling are not included; the
// run ends with the count check.
func Drain(ctx context.Context, factory EnvFactory, c ConsumerSettings, total, httpConcurrency int, progress io.Writer) (*DrainResult, error) {
	env, err := factory(ctx, c)
	if err != nil {
		return nil, err
	}
	defer env.Close() //nolint:errcheck // best effort cleanup
	runID := "drain-" + pgtemp.RandomHex(4)
	want, err := fillStream(ctx, env, runID, total, httpConcurrency)
	if err != nil {
		return nil, err
	}

	pool, err := pgxpool.New(ctx, env.DatabaseURL())
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	cons, err := env.Start(ctx, []string{"consumer"})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cons.Stop() }()
	start := drainPoint{at: time.Now(), cpu: ProcessCPU()}
	first, last, err := watchDrain(ctx, pool, want, c.BatchSize, progress)
	if err != nil {
		return nil, err
	}
	if first.n == last.n {
		// Everything was applied between two polls: measure from the
		// consumer's start instead (its start-up counted in, so the
		// figure is a lower bound).
		first = start
	}
	d := &DrainResult{Name: fmt.Sprintf("consumer drain batch=%d", c.BatchSize), Consumer: c, Events: last.n - first.n}
	if last.at.After(first.at) {
		d.Seconds = last.at.Sub(first.at).Seconds()
		d.PerSecond = float64(d.Events) / d.Seconds
	}
	if d.Events > 0 {
		d.ProcessCPUPerEventUs = float64((last.cpu - first.cpu).Microseconds()) / float64(d.Events)
	}
	if cpu, err := backendCPU(ctx, pool); err == nil && cpu > 0 {
		d.PostgresCPUPerEventUs = float64(cpu.Microseconds()) / float64(want)
	}
	time.Sleep(250 * time.Millisecond) // let a wrong redelivery show up
	d.Redelivered = redelivered(ctx, cons)
	d.Check, err = VerifyCounts(ctx, pool, "orders", "demo", runID, want, 0)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// fillStream has a hookbridge with the ingress role only take total
// webhooks of run runID, then stops it; want is how many events the
// consumer is to apply.
func fillStream(ctx context.Context, env Env, runID string, total, httpConcurrency int) (want int, err error) {
	in, err := env.Start(ctx, []string{"ingress"})
	if err != nil {
		return 0, err
	}
	res, err := Load(ctx, Options{URL: in.URL, Secret: env.Secret(), Concurrency: httpConcurrency, Total: total, RunID: runID})
	if stopErr := in.Stop(); err == nil && stopErr != nil {
		err = stopErr
	}
	if err != nil {
		return 0, fmt.Errorf("fill the stream: %w", err)
	}
	if res.Failed > 0 {
		return 0, fmt.Errorf("fill the stream: %d webhooks not accepted (%v)", res.Failed, res.Statuses)
	}
	return res.Accepted + res.Duplicates, nil
}

// drainPoint is the inbox count n at a poll, with its time and the
// process's CPU time then.
type drainPoint struct {
	at  time.Time
	cpu time.Duration
	n   int
}

// watchDrain polls the inbox count until want events are applied and
// returns the first and the last poll that saw the count move (zero
// points when none did).
func watchDrain(ctx context.Context, pool *pgxpool.Pool, want, batchSize int, progress io.Writer) (first, last drainPoint, err error) {
	// Polled every 100ms: count(*) scans the table, and a tighter poll
	// would take measurable CPU from the consumer it measures.
	lastChange, lastPrint := time.Now(), time.Now()
	for last.n < want {
		select {
		case <-ctx.Done():
			return first, last, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		cpu := ProcessCPU()
		at := time.Now()
		n, err := store.InboxCount(ctx, pool)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // not migrated yet
				continue
			}
			return first, last, fmt.Errorf("count inbox rows: %w", err)
		}
		if n != last.n {
			if first.at.IsZero() {
				first = drainPoint{at: at, cpu: cpu, n: n}
			}
			last, lastChange = drainPoint{at: at, cpu: cpu, n: n}, at
		}
		if time.Since(lastChange) > time.Minute {
			return first, last, fmt.Errorf("drain stalled at %d of %d events", last.n, want)
		}
		if progress != nil && time.Since(lastPrint) >= time.Second {
			lastPrint = time.Now()
			fmt.Fprintf(progress, "drain batch=%d: %d/%d applied\n", batchSize, last.n, want)
		}
	}
	return first, last, nil
}

// backendCPU sums the CPU time of the server processes connected to
// pool's database (other than pool's own), read from /proc: it works when
// Postgres runs on this machine and its /proc entries are readable, and
// returns 0 otherwise.
func backendCPU(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	own := conn.Conn().PgConn().PID()
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, pid := range pids {
		if uint32(pid) == own {
			continue
		}
		total += procCPU(int(pid))
	}
	return total, nil
}
