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
)

// The operator commands (status, replay, dead-letters, conflicts) read
// Postgres directly and JetStream through a client connection. They never
// migrate: they tell the operator to run `hookbridge migrate` instead.

// natsFlags choose how an operator command reaches JetStream.
type natsFlags struct {
	Embedded bool `help:"No NATS URL: open the embedded server's store in data_dir/jetstream. Only while hookbridge serve is stopped: the store has one owner."`
}

// errNoNATS explains why an operator command cannot reach JetStream
// without a URL.
var errNoNATS = errors.New("no NATS URL: the embedded JetStream server belongs to the running `hookbridge serve` and cannot be opened by a second process. " +
	"Set HOOKBRIDGE_NATS_URL or --nats-url to the NATS server serve uses, or stop serve and pass --embedded to open its store")

// opsJetStream connects to cfg.NATSURL, or opens the embedded store when
// asked to and no serve answers on the configured address. close releases
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
		return nil, nil, errNoNATS
	}
	js, err = jetstream.New(nc)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, stop, nil
}

// openEmbeddedStore starts an embedded server on serve's store. Two
// servers on one store would corrupt it, so it refuses while a serve
// answers /healthz on the configured HTTP address.
func openEmbeddedStore(ctx context.Context, cfg app.Config) (*nats.Conn, func(), error) {
	dir := filepath.Join(cfg.DataDir, "jetstream")
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("--embedded: no JetStream store at %s (set --data-dir): %w", dir, err)
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

// parseWhen reads an RFC 3339 time or a duration meaning that long ago.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 2h", s)
}
