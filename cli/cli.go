// Package cli is the hookbridge command line (serve, relay, migrate,
// send, config check, status, replay, dead-letters, conflicts, outbox,
// events, consumers, selftest, version, healthcheck) over the app library.
// cmd/hookbridge is [Main] with the built-in handlers; a team that writes
// its own handlers builds its own main the same way, passing its
// [app.Handlers].
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/internal/gctune"
	"github.com/hookbridge/hookbridge/schema"
)

// Globals are the settings a command line can override. Flags win over
// environment variables, which win over the file, which wins over the
// defaults. Each command takes only the flags it uses (the flag groups
// below), so its help lists no flag it would ignore.
type Globals struct {
	ConfigFlag
	HTTPAddrFlag
	DatabaseFlag
	NATSFlags
}

// ConfigFlag is the configuration file.
type ConfigFlag struct {
	// Not kong's env mapping: kong takes a variable set to "" as a value
	// (and resolves that path to the working directory); [Globals.Load]
	// reads HOOKBRIDGE_CONFIG through the same environment as every other
	// variable, where empty means unset.
	Config string `help:"YAML configuration file (env HOOKBRIDGE_CONFIG)." type:"path"`
}

// HTTPAddrFlag is the webhook listener.
type HTTPAddrFlag struct {
	HTTPAddr string `name:"http-addr" help:"HTTP listen address (env HOOKBRIDGE_HTTP_ADDR; default 127.0.0.1:8080)."`
}

// DatabaseFlag is the database.
type DatabaseFlag struct {
	DatabaseURL string `name:"database-url" help:"Postgres URL (env HOOKBRIDGE_DATABASE_URL, DATABASE_URL, PG* variables)."`
}

// NATSFlags choose the NATS server, or the embedded one's data directory.
type NATSFlags struct {
	NATSURL string `name:"nats-url" help:"External NATS URL; empty runs (serve) or reaches (the other commands) the embedded JetStream server (env HOOKBRIDGE_NATS_URL)."`
	DataDir string `name:"data-dir" help:"Data directory for the embedded server (env HOOKBRIDGE_DATA_DIR; default ./data)."`
}

// The groups commands embed; each yields the [Globals] its command runs
// with.
type (
	// allFlags: serve, relay and the commands that reach JetStream.
	allFlags struct{ Globals }
	// dbFlags: commands that use Postgres only.
	dbFlags struct {
		ConfigFlag
		DatabaseFlag
		ignoredHTTPAddr
		ignoredNATS
	}
	// httpFlags: commands that talk to a running serve over HTTP.
	httpFlags struct {
		ConfigFlag
		HTTPAddrFlag
		ignoredDatabase
		ignoredNATS
	}
)

// The flags a command does not use are still accepted, hidden from its
// help, so that a script can pass one set of settings to every command.
type (
	ignoredHTTPAddr struct {
		HTTPAddr string `name:"http-addr" hidden:"" help:"Not used by this command."`
	}
	ignoredDatabase struct {
		DatabaseURL string `name:"database-url" hidden:"" help:"Not used by this command."`
	}
	ignoredNATS struct {
		NATSURL string `name:"nats-url" hidden:"" help:"Not used by this command."`
		DataDir string `name:"data-dir" hidden:"" help:"Not used by this command."`
	}
)

func (f *allFlags) globals() Globals { return f.Globals }
func (f *dbFlags) globals() Globals {
	return Globals{ConfigFlag: f.ConfigFlag, DatabaseFlag: f.DatabaseFlag}
}
func (f *httpFlags) globals() Globals {
	return Globals{ConfigFlag: f.ConfigFlag, HTTPAddrFlag: f.HTTPAddrFlag}
}

// flagged is a command that takes some of the [Globals].
type flagged interface{ globals() Globals }

// cliCommands is the hookbridge command line.
type cliCommands struct {
	Serve   serveCmd   `cmd:"" help:"Run the ingress, the consumers and the outbox relay."`
	Relay   relayCmd   `cmd:"" help:"Run only the outbox relay (same as serve --role relay)."`
	Migrate migrateCmd `cmd:"" help:"Apply the SQL migrations and exit."`
	Send    sendCmd    `cmd:"" help:"Send a signed test webhook to a running hookbridge."`
	// ConfigCmd is `hookbridge config …` (config.go); the flag --config is Globals'.
	ConfigCmd configCmd `cmd:"" name:"config" help:"Check the configuration (config check)."`
	// Operator commands (ops*.go).
	Status      statusCmd      `cmd:"" help:"Show streams, consumers, outbox, dead letters and conflicts."`
	Replay      replayCmd      `cmd:"" help:"Re-deliver stored webhooks from the HOOKS stream to a consumer (duplicates change nothing)."`
	DeadLetters deadLettersCmd `cmd:"" name:"dead-letters" help:"List, show, requeue or discard messages consumers gave up on."`
	Conflicts   conflictsCmd   `cmd:"" help:"List, show or resolve events whose id came back with a different body."`
	Outbox      outboxCmd      `cmd:"" help:"List pending or dead outbox rows; requeue dead ones."`
	Events      eventsCmd      `cmd:"" help:"Follow one event through HOOKS, the consumers and the outbox."`
	Consumers   consumersCmd   `cmd:"" help:"Pause or resume a consumer; delete a durable no configured consumer owns."`
	Endpoints   endpointsCmd   `cmd:"" help:"List, show, test, disable, enable or replay to delivery endpoints; triage their dead letters."`
	Version     versionCmd     `cmd:"" help:"Print hookbridge's version and commit."`
	Selftest    selftestCmd    `cmd:"" help:"Run the acceptance protocol against a running deployment (needs selftest.enabled)."`
	Healthcheck healthcheckCmd `cmd:"" help:"Exit 0 when the hookbridge on http_addr is ready (/readyz), 1 otherwise (for HEALTHCHECK)."`
}

// osEnv is the process's environment, with a HOOKBRIDGE_* variable set to
// "" taken as unset, as 12-factor tools do: `HOOKBRIDGE_CONFIG=` in a unit
// file or a compose file then means no file, not the working directory.
// Every HOOKBRIDGE_* variable a command reads goes through here.
func osEnv(key string) (string, bool) { return LookupEnv(key) }

// LookupEnv is the environment the command line reads (see osEnv), for a
// program of its own that builds [Globals] (the load tool does).
func LookupEnv(key string) (string, bool) {
	v, ok := os.LookupEnv(key)
	if ok && v == "" && strings.HasPrefix(key, "HOOKBRIDGE_") {
		return "", false
	}
	return v, ok
}

// runtime carries what commands need.
type runtime struct {
	handlers app.Handlers
	stdout   io.Writer
	stderr   io.Writer
	env      app.Env
}

// Main runs the hookbridge command line with handlers and returns the exit
// code: 0 on success, 1 when a command fails, 2 for a bad command line.
func Main(args []string, handlers app.Handlers) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, &runtime{handlers: handlers, stdout: os.Stdout, stderr: os.Stderr, env: osEnv}, os.Exit)
}

// run is [Main] with its context, output, environment and exit (what
// --help and a bad command line call) given, for tests.
func run(ctx context.Context, args []string, rt *runtime, exit func(int)) int {
	var cli cliCommands
	parser, err := kong.New(&cli,
		kong.Name("hookbridge"),
		kong.Description("Bridge verified webhooks through NATS JetStream into PostgreSQL with an exactly-once effect."),
		kong.Writers(rt.stdout, rt.stderr),
		kong.Exit(exit))
	if err != nil {
		fmt.Fprintln(rt.stderr, err)
		return 2
	}
	kctx, err := parser.Parse(globalsLast(args))
	if err != nil {
		// One line that says what is wrong and where the flags are
		// listed, not the whole help above it.
		fmt.Fprintf(rt.stderr, "hookbridge: error: %v (see %s --help)\n", err, commandPath(err))
		exit(2)
		return 2
	}
	if err := runParsed(ctx, kctx, rt); err != nil {
		fmt.Fprintln(rt.stderr, "hookbridge:", err)
		return 1
	}
	return 0
}

// commandPath is the command a parse error is about ("hookbridge
// replay"), or "hookbridge" when none was recognised.
func commandPath(err error) string {
	var perr *kong.ParseError
	if errors.As(err, &perr) && perr.Context != nil {
		if sel := perr.Context.Selected(); sel != nil {
			return sel.FullPath()
		}
	}
	return "hookbridge"
}

// globalFlags are the flags of [Globals], which every command that uses
// one declares itself.
var globalFlags = []string{"--config", "--http-addr", "--database-url", "--nats-url", "--data-dir"}

// globalsLast moves the global flags written before the command to the
// end of args. Each command declares the global flags it uses (so its
// help lists only those), and a flag must then follow its command; but
// `hookbridge --config x.yaml serve`, the order the command line took
// when these flags were the root's, is in scripts and unit files, and
// keeps working this way. Only a leading run of those flags moves.
func globalsLast(args []string) []string {
	var moved []string
	i := 0
	for i < len(args) {
		name, _, hasValue := strings.Cut(args[i], "=")
		if !slices.Contains(globalFlags, name) {
			break
		}
		if hasValue || i+1 >= len(args) {
			moved = append(moved, args[i])
			i++
			continue
		}
		moved = append(moved, args[i], args[i+1])
		i += 2
	}
	if len(moved) == 0 {
		return args
	}
	return append(slices.Clone(args[i:]), moved...)
}

// runParsed runs the parsed command with ctx, rt and the [Globals] its
// flags set (none for a command that takes none).
func runParsed(ctx context.Context, kctx *kong.Context, rt *runtime) error {
	var g Globals
	if sel := kctx.Selected(); sel != nil && sel.Target.CanAddr() {
		if f, ok := sel.Target.Addr().Interface().(flagged); ok {
			g = f.globals()
		}
	}
	kctx.BindTo(ctx, (*context.Context)(nil))
	return kctx.Run(&g, rt)
}

// Load builds the effective configuration from the flags, env and
// handlers (see [app.Load]); without --config the file is
// HOOKBRIDGE_CONFIG's, when env has it.
func (g *Globals) Load(env app.Env, handlers app.Handlers) (app.Config, error) {
	path := g.Config
	if path == "" {
		if v, ok := env("HOOKBRIDGE_CONFIG"); ok && v != "" {
			path = v
		}
	}
	return app.Load(path, env, app.Overrides{HTTPAddr: g.HTTPAddr, DatabaseURL: g.DatabaseURL, NATSURL: g.NATSURL, DataDir: g.DataDir}, handlers)
}

func (g *Globals) load(rt *runtime) (app.Config, error) { return g.Load(rt.env, rt.handlers) }

// serveCmd runs hookbridge.
type serveCmd struct {
	Role []string `help:"Roles to run: ingress, consumer, relay, delivery or all (repeatable)." default:"all" enum:"ingress,consumer,relay,delivery,all"`
	allFlags
}

// Run implements the serve command.
func (c *serveCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	log := app.NewLogger(cfg, rt.stderr)
	if cfg.UsesDevSecret() {
		log.Warn("source demo uses the built-in development secret; set HOOKBRIDGE_DEMO_SECRET or a config file before exposing this instance")
	}
	srv, err := app.NewServer(cfg, rt.handlers, c.Role, log)
	if err != nil {
		return err
	}
	if gctune.Wanted(rt.env) {
		// A serve process's garbage is all short-lived traffic: with
		// Go's default the collector took a fifth of its CPU.
		tctx, stop := context.WithCancel(ctx)
		defer gctune.Start(tctx, gctune.DefaultHeadroom, time.Second)()
		defer stop()
	}
	return srv.Run(ctx, nil)
}

// relayCmd runs the outbox relay alone, so it can scale separately.
type relayCmd struct{ allFlags }

// Run implements the relay command.
func (c *relayCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	return (&serveCmd{Role: []string{app.RoleRelay}, allFlags: allFlags{*g}}).Run(ctx, g, rt)
}

// migrateCmd applies migrations.
type migrateCmd struct{ dbFlags }

// Run implements the migrate command.
func (c *migrateCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.PoolURL())
	if err != nil {
		return fmt.Errorf("postgres config: %w", err)
	}
	defer pool.Close()
	n, err := schema.Migrate(ctx, pool, app.MigrationSets(cfg, rt.handlers)...)
	if err != nil {
		return err
	}
	fmt.Fprintf(rt.stdout, "applied %d migration(s)\n", n)
	return nil
}
