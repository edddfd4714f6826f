package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/opsfor"
)

// The operator commands (status, replay, dead-letters, conflicts) read
// Postgres directly and JetStream through a client connection. They never
// migrate: they tell the operator to run `hookbridge migrate` instead.

// natsFlags choose how an operator command reaches JetStream.
type natsFlags struct {
	Embedded bool `help:"No NATS URL and serve stopped: open the embedded server's store in data_dir/jetstream (while serve runs, commands reach its embedded server without this flag)."`
}

// errNoNATS explains why an operator command cannot reach JetStream
// without a URL.
var errNoNATS = errors.New("no NATS URL, and no running `hookbridge serve` with the embedded server on this data directory (it writes " +
	app.OpsEndpointFile + " there while it runs). Start serve with the same --data-dir, set HOOKBRIDGE_NATS_URL or --nats-url to the NATS server serve uses, " +
	"or, with serve stopped, pass --embedded to open its store")

// opsJetStream connects to cfg.NATSURL; without one, to the embedded
// server of the serve running on cfg.DataDir (through the loopback
// listener and password it wrote to data_dir/ops.json), or, when asked
// to and no serve runs, opens the embedded store itself. close releases
// whatever was opened.
func opsJetStream(ctx context.Context, cfg app.Config, f natsFlags) (js jetstream.JetStream, closeFn func(), err error) {
	var nc *nats.Conn
	var stop func()
	switch {
	case cfg.NATSURL != "":
		nc, err = nats.Connect(cfg.NATSURL, nats.Name("hookbridge-ops"), nats.Timeout(5*time.Second))
		if err != nil {
			return nil, nil, fmt.Errorf("connect nats: %w", err)
		}
		stop = nc.Close
	case f.Embedded:
		nc, stop, err = openEmbeddedStore(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
	default:
		nc, err = connectRunningServe(cfg)
		if err != nil {
			return nil, nil, err
		}
		stop = nc.Close
	}
	js, err = jetstream.New(nc)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, stop, nil
}

// connectRunningServe connects to the embedded server of the serve
// running on cfg.DataDir.
func connectRunningServe(cfg app.Config) (*nats.Conn, error) {
	ep, err := app.ReadOpsEndpoint(cfg.DataDir)
	if errors.Is(err, app.ErrNoOpsEndpoint) {
		return nil, errNoNATS
	}
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(ep.URL, nats.UserInfo(ep.User, ep.Password), nats.Name("hookbridge-ops"),
		nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		return nil, fmt.Errorf("%s names the embedded server of a running serve at %s, but it does not answer (%w): "+
			"a serve that crashed leaves the file behind; start serve again, or pass --embedded while it is stopped",
			filepath.Join(cfg.DataDir, app.OpsEndpointFile), ep.URL, err)
	}
	return nc, nil
}

// openEmbeddedStore starts an embedded server on serve's store. Two
// servers on one store would corrupt it, so it refuses while a serve
// answers /healthz on the configured HTTP address.
func openEmbeddedStore(ctx context.Context, cfg app.Config) (*nats.Conn, func(), error) {
	dir := filepath.Join(cfg.DataDir, "jetstream")
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("--embedded: no JetStream store at %s (set --data-dir): %w", dir, err)
	}
	if nc, err := connectRunningServe(cfg); err == nil {
		nc.Close()
		return nil, nil, fmt.Errorf("--embedded: a running hookbridge serve owns the store at %s; run the command without --embedded to use it", dir)
	}
	if serveAnswers(ctx, cfg.HTTPAddr) {
		return nil, nil, fmt.Errorf("--embedded: hookbridge serve answers on %s and owns the store at %s; stop it first, or run serve with an external NATS and pass --nats-url", cfg.HTTPAddr, dir)
	}
	ns, err := embedded.Start(embedded.Options{StoreDir: dir})
	if err != nil {
		return nil, nil, err
	}
	nc, err := embedded.Connect(ns)
	if err != nil {
		ns.Shutdown()
		return nil, nil, err
	}
	stop := func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	return nc, stop, nil
}

func serveAnswers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// withOps runs fn with the operator actions over the configured database
// and, when needJS, JetStream (see opsJetStream).
func withOps(ctx context.Context, cfg app.Config, rt *runtime, f natsFlags, needJS bool, fn func(o *ops.Ops) error) error {
	return openOps(ctx, cfg, rt, f, needJS, func(o *ops.Ops, jsErr error) error {
		if jsErr != nil {
			return jsErr
		}
		return fn(o)
	})
}

// withOptionalJS is withOps for a command that shows what it can without
// JetStream: fn gets the actions without it, and why, when it cannot be
// reached.
func withOptionalJS(ctx context.Context, cfg app.Config, rt *runtime, f natsFlags, fn func(o *ops.Ops, jsErr error) error) error {
	return openOps(ctx, cfg, rt, f, true, fn)
}

func openOps(ctx context.Context, cfg app.Config, rt *runtime, f natsFlags, withJS bool, fn func(o *ops.Ops, jsErr error) error) error {
	pool, err := opsPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The actions serve's admin API runs, with the same consumer options.
	o, err := opsfor.New(cfg, rt.handlers, pool, nil, app.NewLogger(cfg, rt.stderr))
	if err != nil {
		return err
	}
	if !withJS {
		return fn(o, nil)
	}
	js, closeNATS, err := opsJetStream(ctx, cfg, f)
	if err != nil {
		return fn(o, err)
	}
	defer closeNATS()
	o.JS = js
	return fn(o, nil)
}

// opsPool opens the configured database.
func opsPool(ctx context.Context, cfg app.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, cfg.PoolURL())
	if err != nil {
		return nil, fmt.Errorf("postgres config: %w", err)
	}
	return pool, nil
}

// dbError adds the fix to errors caused by a database that was never
// migrated.
func dbError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w (run `hookbridge migrate` first)", err)
	}
	return err
}

// writeJSON prints v indented, for scripts.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return nil
}

// table writes rows aligned in columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// clip shortens s for a table cell.
func clip(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
