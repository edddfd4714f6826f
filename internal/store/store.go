// Package store holds every SQL statement on hookbridge's own tables (the
// schema "hookbridge": inbox, outbox, conflicts, dead_letters,
// delivery_failures) and small typed functions that run them. The role
// packages (consumer, publisher, the commands, app, the load tool) call
// these functions instead of writing SQL, so each statement exists once and
// can be read as SQL in sql/.
//
// The functions take a [Querier] (a pgx.Tx, a *pgxpool.Pool or a *pgx.Conn)
// with ctx first, and return the driver's errors unwrapped: the caller knows
// what the statement was for and adds that context. Statements that must
// travel in one round trip with others have QueueX helpers that add them to
// a caller's pgx.Batch.
//
// A statement has one name, table noun first, then what it does: the file
// sql/dead_letter_resolve.sql, its variable sqlDeadLetterResolve and the
// function DeadLetterResolve (QueueX when it is queued into a batch). A
// function that runs several statements is named for what they do
// together. A function that writes or reads many rows takes a slice of a
// row struct, named XParams when it has no other use, rather than
// parallel slices.
package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what the functions need from a connection, a pool or a
// transaction (like sqlc's DBTX).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// The statements are .sql files, one statement per file, embedded rather
// than generated: no code generator is needed to build or change them, and
// each is reviewed as plain SQL. Whole-line "--" comments explain the
// statement in the file and are dropped when it is loaded.
//
//go:embed sql/*.sql
var files embed.FS

// loaded records which files a package-level variable took, so that init
// can refuse a file no code uses (a statement left behind by a change).
var loaded = map[string]bool{}

// load returns the statement in sql/name without its comment lines. A
// missing file is a build mistake, found the first time the package is
// initialised (every test of every caller), not an input error.
func load(name string) string {
	b, err := files.ReadFile("sql/" + name)
	if err != nil {
		panic(fmt.Sprintf("store: statement %s: %v", name, err))
	}
	loaded[name] = true
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

func init() {
	if err := unusedFiles(); err != nil {
		panic(err)
	}
}

// unusedFiles reports sql/ files that no statement variable loaded.
func unusedFiles() error {
	names, err := fs.Glob(files, "sql/*.sql")
	if err != nil {
		return fmt.Errorf("store: list statements: %w", err)
	}
	var unused []string
	for _, n := range names {
		if !loaded[strings.TrimPrefix(n, "sql/")] {
			unused = append(unused, n)
		}
	}
	if len(unused) > 0 {
		return fmt.Errorf("store: statement files not used by any variable: %s", strings.Join(unused, ", "))
	}
	return nil
}

// Cutoff is the database's now() minus us microseconds: retention cutoffs
// are taken from the database clock, which every row's timestamps use.
func Cutoff(ctx context.Context, q Querier, us int64) (t time.Time, err error) {
	err = q.QueryRow(ctx, sqlCutoff, us).Scan(&t)
	return t, err
}

var sqlCutoff = load("cutoff.sql")

// returnsRows runs a statement that returns the rows it locked or changed
// and reports whether there was any. Every row is read, so the statement
// has run to its end when it returns.
func returnsRows(ctx context.Context, q Querier, sql string, args ...any) (bool, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n > 0, rows.Err()
}
