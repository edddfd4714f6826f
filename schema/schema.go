// Package schema holds hookbridge's versioned SQL migrations and applies
// them. Migrations are plain .sql files embedded in the binary, applied in
// order, each in its own transaction, and recorded so running Migrate again
// changes nothing. A Postgres advisory lock serialises concurrent starts.
package schema

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var coreFS embed.FS

// Set is a named, ordered set of migrations. Its files are named
// NNNN_description.sql; the number is the version.
type Set struct {
	Name string
	FS   fs.FS // files at the root of FS
}

// Core is hookbridge's own migration set (schema "hookbridge").
func Core() Set {
	sub, err := fs.Sub(coreFS, "migrations")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return Set{Name: "hookbridge", FS: sub}
}

// Migration is one parsed migration file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load parses the set's files in version order.
func (s Set) Load() ([]Migration, error) {
	entries, err := fs.ReadDir(s.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations %s: %w", s.Name, err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: name must be NNNN_description.sql", s.Name, e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration %s: version %d used by %s and %s", s.Name, v, prev, e.Name())
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(s.FS, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s/%s: %w", s.Name, e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies every set's pending migrations and returns how many it
// applied. It is safe to run from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool, sets ...Set) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()

	lockKey := advisoryKey("hookbridge.migrate")
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return 0, fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck // unlock also happens when the session ends

	if _, err := conn.Exec(ctx, bookkeeping); err != nil {
		return 0, fmt.Errorf("migrate: bookkeeping table: %w", err)
	}

	applied := 0
	for _, set := range sets {
		migs, err := pending(ctx, conn, set)
		if err != nil {
			return applied, err
		}
		for _, m := range migs {
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return apply(ctx, tx, set, m) })
			if err != nil {
				return applied, fmt.Errorf("migrate %s: apply %s: %w", set.Name, m.Name, err)
			}
			applied++
		}
	}
	return applied, nil
}

// MigrateTx applies every set's pending migrations inside tx and returns
// how many it applied; nothing is kept unless the caller commits tx. It
// lets a check see the schema the migrations would make (`hookbridge
// config check` prepares statements against it) and then roll back,
// leaving the database as it was. A transaction-scoped advisory lock
// waits for a concurrent [Migrate].
func MigrateTx(ctx context.Context, tx pgx.Tx, sets ...Set) (int, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryKey("hookbridge.migrate")); err != nil {
		return 0, fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, bookkeeping); err != nil {
		return 0, fmt.Errorf("migrate: bookkeeping table: %w", err)
	}
	applied := 0
	for _, set := range sets {
		migs, err := pending(ctx, tx, set)
		if err != nil {
			return applied, err
		}
		for _, m := range migs {
			// A savepoint per migration, as Migrate's transaction per
			// migration: its statements see the ones before it.
			err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return apply(ctx, sp, set, m) })
			if err != nil {
				return applied, fmt.Errorf("migrate %s: apply %s: %w", set.Name, m.Name, err)
			}
			applied++
		}
	}
	return applied, nil
}

// bookkeeping creates the table that records applied migrations.
const bookkeeping = `
		CREATE SCHEMA IF NOT EXISTS hookbridge;
		CREATE TABLE IF NOT EXISTS hookbridge.schema_migrations (
			set_name   text        NOT NULL,
			version    integer     NOT NULL,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (set_name, version)
		)`

// querier is what pending needs of a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pending loads set and returns its migrations not applied yet, in order.
func pending(ctx context.Context, q querier, set Set) ([]Migration, error) {
	migs, err := set.Load()
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, "SELECT version FROM hookbridge.schema_migrations WHERE set_name = $1", set.Name)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: read applied versions: %w", set.Name, err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("migrate %s: read applied versions: %w", set.Name, err)
	}
	done := map[int]bool{}
	for _, v := range versions {
		done[int(v)] = true
	}
	var out []Migration
	for _, m := range migs {
		if !done[m.Version] {
			out = append(out, m)
		}
	}
	return out, nil
}

// apply runs one migration and records it, in tx.
func apply(ctx context.Context, tx pgx.Tx, set Set, m Migration) error {
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "INSERT INTO hookbridge.schema_migrations (set_name, version, name) VALUES ($1, $2, $3)",
		set.Name, m.Version, m.Name)
	return err
}

func advisoryKey(s string) int64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int64(h.Sum64())
}
