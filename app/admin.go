package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/admin"
	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/opsfor"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The command line builds its operator actions with opsFor too: it
// reaches it through package opsfor, since no exported function may
// return the internal *ops.Ops.
func init() { opsfor.Register(registeredOps) }

// registeredOps is opsFor for the command line, through package opsfor.
func registeredOps(cfg, handlers any, pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger) (*ops.Ops, error) {
	c, ok := cfg.(Config)
	if !ok {
		return nil, fmt.Errorf("operator actions: the configuration is a %T, not an app.Config", cfg)
	}
	h, ok := handlers.(Handlers)
	if !ok {
		return nil, fmt.Errorf("operator actions: the handlers are a %T, not app.Handlers", handlers)
	}
	return opsFor(c, h, pool, js, log), nil
}

// opsFor is the operator actions (package ops) over the deployment cfg
// configures, for serve's admin API and (through package opsfor) the
// command line: its consumers with their handlers, subscriptions and
// handler timeouts as serve's consumers run with them (registered Go
// handlers, SQL consumers' statements and the self-test's; a consumer
// whose handler cannot be built keeps none, and replaying to it then says
// so), HOOKS's age horizon, and the delivery endpoints.
func opsFor(cfg Config, handlers Handlers, pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger) *ops.Ops {
	handlers = WithSelftest(cfg, handlers)
	consumers := make([]ops.Consumer, 0, len(cfg.Consumers))
	for i := range cfg.Consumers {
		// Handler nil when it cannot be built; replaying to it says so.
		o, _ := cfg.consumerOptions(&cfg.Consumers[i], handlers)
		consumers = append(consumers, ops.Consumer{Name: o.Name, Sources: o.Sources, EventTypes: o.EventTypes,
			Handler: o.Handler, ApplyTimeout: o.HandlerTimeout})
	}
	// The endpoints that could be read, and why others could not (a
	// secret missing where the command runs): status and the actions on
	// the others say so.
	endpoints, endpointsErr := cfg.Delivery.resolved(nil)
	return &ops.Ops{Pool: pool, JS: js, Consumers: consumers, Logger: log,
		HooksMaxAge: (stream.Options{MaxAge: cfg.Streams.MaxAge}).HooksMaxAge(),
		Endpoints:   endpoints, EndpointsErr: endpointsErr, Sign: verify.SignStandard}
}

// startAdmin listens on admin_addr and returns the function that serves
// the admin API there until ctx ends; nil when no admin token is set.
// console is served at /.
func (s *Server) startAdmin(checks []check, console fs.FS) (func(ctx context.Context) error, error) {
	token := s.cfg.AdminTokenValue()
	if token == "" {
		s.log.Info("admin API and console off: set admin_token (env HOOKBRIDGE_ADMIN_TOKEN) or admin_token_file to serve them on admin_addr",
			"admin_addr", s.cfg.AdminAddr)
		return nil, nil
	}
	h, err := admin.New(admin.Options{
		Ops:     opsFor(s.cfg, s.handlers, s.pool, s.js, s.log),
		Token:   token,
		Ready:   func(ctx context.Context) bool { return allReady(ctx, checks) },
		Console: console,
		Logger:  s.log,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", s.cfg.AdminAddr)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("admin listen %s: %w", s.cfg.AdminAddr, err)
	}
	s.adminListener = ln
	// No write timeout: a dry run over a long range answers when it has
	// read the range. Headers must come quickly all the same.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	s.log.Info("admin API and console listening", "url", "http://"+ln.Addr().String()+"/")
	return func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			h.Close()
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("admin http: %w", err)
		case <-ctx.Done():
		}
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(shutdownCtx)
		h.Close() // replays stop before the pool closes
		return err
	}, nil
}

// AdminAddr is the admin listener's address once Run has started it
// ("" when the admin API is off).
func (s *Server) AdminAddr() string {
	if s.adminListener == nil {
		return ""
	}
	return s.adminListener.Addr().String()
}
