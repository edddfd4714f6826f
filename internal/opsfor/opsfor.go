// Package opsfor builds the operator actions (package ops) over a
// configured deployment, one way for serve's admin API and the command
// line: each configured consumer with the handler, subscription and
// handler timeout serve's consumer runs with (defaults included), and
// HOOKS's age horizon.
//
// What they are built from is package app's (its configuration and the
// engine options it makes of it). app cannot export a function that
// returns *ops.Ops, since a public declaration names no internal type, and
// nothing under internal/ imports app; so app registers its builder here
// when it is initialised, and the command line, which imports app, calls
// [New].
package opsfor

import (
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/ops"
)

// Builder builds the operator actions over the deployment cfg (an
// app.Config) configures, with handlers (its app.Handlers).
type Builder func(cfg, handlers any, pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger) (*ops.Ops, error)

var build Builder

// Register makes b the builder [New] calls; package app calls it once,
// when it is initialised.
func Register(b Builder) { build = b }

// New returns the operator actions over the deployment cfg (an
// app.Config) configures, with handlers (its app.Handlers), over pool and
// js (nil: the actions that need JetStream fail until the caller sets
// Ops.JS), logging replays to log (nil: slog.Default).
func New(cfg, handlers any, pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger) (*ops.Ops, error) {
	if build == nil {
		return nil, errors.New("operator actions: no builder registered (package app is not linked in)")
	}
	return build(cfg, handlers, pool, js, log)
}
