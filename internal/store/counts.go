package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The tables, by qualified name, for messages and existence checks.
const (
	TableInbox       = "hookbridge.inbox"
	TableOutbox      = "hookbridge.outbox"
	TableDeadLetters = "hookbridge.dead_letters"
)

var (
	sqlInboxCount            = load("inbox_count.sql")
	sqlInboxCountPrefix      = load("inbox_count_prefix.sql")
	sqlOutboxCountPrefix     = load("outbox_count_prefix.sql")
	sqlDeadLetterCountPrefix = load("dead_letter_count_prefix.sql")
	sqlInboxFindApplied      = load("inbox_find_applied.sql")
	sqlInboxFootprint        = load("inbox_footprint.sql")
	sqlOutboxFootprint       = load("outbox_footprint.sql")
	sqlOutboxCountPending    = load("outbox_count_pending.sql")
	sqlTableExists           = load("table_exists.sql")
)

// TableExists reports whether the table named (for example TableInbox)
// exists: a database not migrated yet has none of them.
func TableExists(ctx context.Context, q Querier, table string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, sqlTableExists, table).Scan(&ok)
	return ok, err
}

func count(ctx context.Context, q Querier, sql string, args ...any) (int, error) {
	var n int
	err := q.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// InboxCount counts all inbox rows.
func InboxCount(ctx context.Context, q Querier) (int, error) { return count(ctx, q, sqlInboxCount) }

// InboxCountPrefix counts the consumer's inbox rows of source whose event
// id starts with prefix.
func InboxCountPrefix(ctx context.Context, q Querier, consumer, source, prefix string) (int, error) {
	return count(ctx, q, sqlInboxCountPrefix, consumer, source, prefix)
}

// OutboxCountPrefix counts the outbox rows whose event id starts with
// prefix.
func OutboxCountPrefix(ctx context.Context, q Querier, prefix string) (int, error) {
	return count(ctx, q, sqlOutboxCountPrefix, prefix)
}

// DeadLetterCountPrefix counts the consumer's dead letters (resolved or
// not) whose event id starts with prefix.
func DeadLetterCountPrefix(ctx context.Context, q Querier, consumer, prefix string) (int, error) {
	return count(ctx, q, sqlDeadLetterCountPrefix, consumer, prefix)
}

// InboxFindApplied returns those of eventIDs that the consumer's inbox holds
// for source.
func InboxFindApplied(ctx context.Context, q Querier, consumer, source string, eventIDs []string) ([]string, error) {
	rows, err := q.Query(ctx, sqlInboxFindApplied, consumer, source, eventIDs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// InboxFootprint is the inbox's total size on disk (with indexes and
// TOAST) and its row count.
func InboxFootprint(ctx context.Context, q Querier) (bytes, rows int64, err error) {
	err = q.QueryRow(ctx, sqlInboxFootprint).Scan(&bytes, &rows)
	return bytes, rows, err
}

// OutboxCountPending counts the pending outbox messages, on a schema of
// any version.
func OutboxCountPending(ctx context.Context, q Querier) (int, error) {
	return count(ctx, q, sqlOutboxCountPending)
}

// OutboxFootprint is InboxFootprint for the outbox, on a schema of any
// version.
func OutboxFootprint(ctx context.Context, q Querier) (bytes, rows int64, err error) {
	err = q.QueryRow(ctx, sqlOutboxFootprint).Scan(&bytes, &rows)
	return bytes, rows, err
}

var (
	sqlConflictCountPrefix = load("conflict_count_prefix.sql")
	sqlPrefixPurge         = load("prefix_purge.sql")
)

// ConflictCountPrefix counts the conflicts of source's events whose id
// starts with prefix, whoever detected them.
func ConflictCountPrefix(ctx context.Context, q Querier, source, prefix string) (int, error) {
	return count(ctx, q, sqlConflictCountPrefix, source, prefix)
}

// PurgedRows are the rows [PrefixPurge] deleted, per table.
type PurgedRows struct {
	Inbox, Conflicts, Failures, DeadLetters, Outbox int64
}

// PrefixPurge deletes, in one statement, the rows of consumer and source
// whose event id starts with prefix (inbox, failure counters, dead
// letters; conflicts of source) and the outbox rows whose id starts with
// outboxPrefix. It is for rows a test run made under a run id of its own.
func PrefixPurge(ctx context.Context, q Querier, consumer, source, prefix, outboxPrefix string) (PurgedRows, error) {
	var p PurgedRows
	err := q.QueryRow(ctx, sqlPrefixPurge, consumer, source, prefix, outboxPrefix).Scan(&p.Inbox, &p.Conflicts, &p.Failures, &p.DeadLetters, &p.Outbox)
	return p, err
}
