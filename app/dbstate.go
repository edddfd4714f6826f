package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// readyReason is a check's failure that /readyz names instead of only
// "unavailable": a cause the operator must fix, never a credential.
type readyReason struct{ text string }

func (r *readyReason) Error() string { return r.text }

// sqlstateInvalidCatalogName is Postgres's "database does not exist".
const sqlstateInvalidCatalogName = "3D000"

// missingDatabase is a readyReason naming the database when err says it
// does not exist, nil for any other error. Retrying cannot fix it, so it
// is said at once instead of waiting through the backoff.
func missingDatabase(err error, pool *pgxpool.Pool) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateInvalidCatalogName {
		return nil
	}
	cc := pool.Config().ConnConfig
	return &readyReason{fmt.Sprintf("database %q does not exist on %s:%d: create it, or point database_url at one that does (retrying)",
		cc.Database, cc.Host, cc.Port)}
}

// pingPostgres is the postgres readiness check: a ping, whose failure for
// a database that does not exist says so.
func (s *Server) pingPostgres(ctx context.Context) error {
	err := s.pool.Ping(ctx)
	if missing := missingDatabase(err, s.pool); missing != nil {
		return missing
	}
	return err
}
