package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.yaml.in/yaml/v3"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/sqlconsumer"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

// SQLConsumerConfig declares a consumer applied by SQL statements instead
// of a Go handler (package sqlconsumer has the contract):
//
//	sql:
//	  migrations: ./migrations/tickets   # NNNN_name.sql, relative to the config file
//	  apply:
//	    issues.opened: INSERT …           # one statement
//	    issues.closed: [UPDATE …, SELECT hookbridge.enqueue(…)]  # or a list, run in order
//	    "*": …                            # any other subscribed type
//
// The consumer receives its event_types; without them, the types apply
// names ("*" then needs event_types: it stands for the listed types that
// have no statements of their own). Every listed type needs statements
// (its own or "*"), and every type apply names must be listed.
type SQLConsumerConfig struct {
	// Migrations is a directory of NNNN_name.sql files, relative to the
	// configuration file, applied like hookbridge's own migrations as the
	// schema set named after the consumer. Optional.
	Migrations string `yaml:"migrations"`
	// Apply maps an event type, or "*", to the statements run for it.
	Apply map[string]Statements `yaml:"apply"`
}

// Statements is one SQL statement or a list of them; YAML takes a scalar
// or a sequence.
type Statements []string

// UnmarshalYAML accepts a scalar or a sequence of strings. A plain
// (unquoted) statement followed by a comment on its line is refused: YAML
// ends a plain scalar at " #", so "@body::jsonb #>> '{a,b}'" would lose
// everything from #>> on and leave a statement that looks whole in the
// file.
func (s *Statements) UnmarshalYAML(n *yaml.Node) error {
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	for _, it := range items {
		if it.Kind == yaml.ScalarNode && it.Style == 0 && it.LineComment != "" {
			return fmt.Errorf("line %d: this statement is cut at %q: YAML ends an unquoted value at \" #\"; "+
				"write it as a block (| on the line before) or in quotes", it.Line, it.LineComment)
		}
	}
	var l stringList
	if err := l.UnmarshalYAML(n); err != nil {
		return err
	}
	*s = Statements(l)
	return nil
}

// apply is the statements in the form package sqlconsumer takes.
func (c *SQLConsumerConfig) apply() map[string][]string {
	out := make(map[string][]string, len(c.Apply))
	for k, v := range c.Apply {
		out[k] = v
	}
	return out
}

// resolve is path relative to the configuration file's directory (the
// working directory for a configuration not read from a file).
func (c *Config) resolve(path string) string {
	if filepath.IsAbs(path) || c.dir == "" {
		return path
	}
	return filepath.Join(c.dir, path)
}

// sqlTypes are the event types an SQL consumer without event_types
// receives: those apply names, "*" aside.
func (c *SQLConsumerConfig) sqlTypes() []string {
	var out []string
	for k := range c.Apply {
		if k != sqlconsumer.Fallback {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// migrationSet is the consumer's schema set, when it has migrations.
func (c *Config) migrationSet(cc *ConsumerConfig) (schema.Set, bool) {
	if cc.SQL == nil || cc.SQL.Migrations == "" {
		return schema.Set{}, false
	}
	return schema.Set{Name: cc.Name, FS: os.DirFS(c.resolve(cc.SQL.Migrations))}, true
}

// validateSQL checks an SQL consumer's block; bad reports as Validate does.
func (c *Config) validateSQL(key string, cc *ConsumerConfig, handlers Handlers, bad func(key, format string, args ...any)) {
	key += ".sql"
	h, err := sqlconsumer.New(cc.Name, cc.SQL.apply())
	if err != nil {
		bad(key+".apply", "%v", err)
		return
	}
	if len(cc.EventTypes) == 0 && len(h.Types()) == 0 {
		bad(key+".apply", `"*" alone needs event_types: it stands for the listed types without statements of their own`)
	}
	subscribed := map[string]bool{}
	for _, t := range cc.EventTypes {
		subscribed[stream.TypeSubject(t)] = true
		if !h.Covers(t) {
			bad(key+".apply", "event type %q has no statements (add them, or %q for every other type)", t, sqlconsumer.Fallback)
		}
	}
	if len(cc.EventTypes) > 0 {
		for _, t := range h.Types() {
			if !subscribed[stream.TypeSubject(t)] {
				bad(key+".apply", "%q is not in event_types: its statements would never run", t)
			}
		}
	}
	if cc.SQL.Migrations == "" {
		return
	}
	if cc.Name == schema.Core().Name {
		bad(key+".migrations", "a consumer named %q cannot have migrations: the set name is hookbridge's own", cc.Name)
		return
	}
	for _, other := range c.Consumers {
		for _, set := range handlers[other.Handler].Migrations {
			if other.SQL == nil && set.Name == cc.Name {
				bad(key+".migrations", "the set name %q is taken by handler %s's migrations; rename the consumer", cc.Name, other.Handler)
				return
			}
		}
	}
	dir := c.resolve(cc.SQL.Migrations)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		bad(key+".migrations", "%s is not a directory (relative paths start at the configuration file)", dir)
		return
	}
	set, _ := c.migrationSet(cc)
	if _, err := set.Load(); err != nil {
		bad(key+".migrations", "%v", err)
	}
}

// Concurrency is how many batches of consumer cc apply at once: the
// configured number; else, for an SQL consumer, 1 unless every source it
// reads has an ordering key; else [engine.DefaultConcurrency]. An SQL
// statement cannot ask for an event that came too early to be retried
// (an UPDATE that finds no row just finds none): without keys, one
// batch at a time on one instance is the closest to stream order; with
// keys, the events of each key apply in stream order at any concurrency.
func (c *Config) Concurrency(cc *ConsumerConfig) int {
	switch {
	case cc.Concurrency > 0:
		return cc.Concurrency
	case cc.SQL != nil && !c.keyedOnly(cc):
		return 1
	default:
		return engine.DefaultConcurrency
	}
}

// NewHandler builds the consumer's handler: its SQL statements, or the
// registered Go handler it names. serve and replay apply with it.
func (cc *ConsumerConfig) NewHandler(handlers Handlers) (consumer.Handler, error) {
	if cc.SQL == nil {
		spec, ok := handlers[cc.Handler]
		if !ok || spec.New == nil {
			return nil, fmt.Errorf("consumer %s: %q is not a registered handler", cc.Name, cc.Handler)
		}
		return spec.New(cc.Name), nil
	}
	h, err := sqlconsumer.New(cc.Name, cc.SQL.apply())
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cc.Name, err)
	}
	return h, nil
}

// CheckSQLConsumers prepares every statement of every SQL consumer of cfg
// against the database, in a transaction it rolls back: after applying,
// inside that transaction, whatever migrations are still pending (none
// when serve has just migrated). It fails, naming the consumer, the event
// type and Postgres's message, on a syntax error, an unknown table,
// column or function, or a type that does not fit, and changes nothing.
// serve runs it after migrating, and `hookbridge config check` without
// serving.
func CheckSQLConsumers(ctx context.Context, pool *pgxpool.Pool, cfg Config, handlers Handlers) error {
	var hs []*sqlconsumer.Handler
	for i := range cfg.Consumers {
		cc := &cfg.Consumers[i]
		if cc.SQL == nil {
			continue
		}
		h, err := sqlconsumer.New(cc.Name, cc.SQL.apply())
		if err != nil {
			return fmt.Errorf("consumer %s: %w", cc.Name, err)
		}
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return nil
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("check sql consumers: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // always rolled back: a check changes nothing
	if _, err := schema.MigrateTx(ctx, tx, MigrationSets(cfg, handlers)...); err != nil {
		return fmt.Errorf("check sql consumers: %w", err)
	}
	var errs []error
	for _, h := range hs {
		if err := h.Check(ctx, tx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sql consumers: a statement does not prepare:\n%w", err)
	}
	return nil
}
