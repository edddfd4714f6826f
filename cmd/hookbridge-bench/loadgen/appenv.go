package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/internal/pgtemp"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// AppFactory builds in-process environments on the app library: each has a
// fresh database created on adminURL's server (dropped by Close) and a
// JetStream store in a temporary directory, the default demo source with a
// random secret and the orders consumer with the given settings. Streams,
// relay and embedded NATS settings are taken from base. The servers log at logLevel to
// logOut.
func AppFactory(adminURL string, base app.Config, handlers app.Handlers, logLevel string, logOut io.Writer) EnvFactory {
	return func(ctx context.Context, cs ConsumerSettings) (Env, error) {
		db, err := pgtemp.Create(ctx, adminURL, "hookbridge_bench", "")
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
			// The embedded server's fsync setting (--sync-interval).
			EmbeddedNATS: base.EmbeddedNATS,
			Sources:      app.DefaultSources(func(k string) (string, bool) { return secret, k == "HOOKBRIDGE_DEMO_SECRET" }),
			Consumers:    app.DefaultConsumers(),
		}
		cfg.Consumers[0].BatchSize = cs.BatchSize
		cfg.Consumers[0].BatchWait = cs.BatchWait
		cfg.Consumers[0].Concurrency = cs.Concurrency
		cfg.ApplyEnv(noEnv)
		if err := cfg.Complete(noEnv, handlers); err != nil {
			_ = db.Drop()
			_ = os.RemoveAll(dir)
			return nil, err
		}
		return &benchEnv{cfg: cfg, handlers: handlers, db: db, dir: dir, secret: secret, log: app.NewLogger(cfg, logOut)}, nil
	}
}

// benchEnv is one in-process environment (see [Env]).
type benchEnv struct {
	cfg      app.Config
	handlers app.Handlers
	db       *pgtemp.Database
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
func (e *benchEnv) Start(ctx context.Context, roles []string) (*Instance, error) {
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
		return &Instance{URL: "http://" + addr, Stop: stop, Events: NATSEvents(srv.NATS()), Redelivered: e.redelivered(srv)}, nil
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
