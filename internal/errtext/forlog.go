package errtext

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ForLog is [Short] of err's text for a log line. Postgres quotes the
// offending value in many messages (invalid input syntax for type bigint:
// "…", value "…" is out of range), and that value comes from the event's
// body, which a log must never hold. So the text of every Postgres error
// in err's chain is replaced by its severity, its message with each quoted
// part masked, and its SQLSTATE; a quoted part that is the error's own
// schema, table, column, constraint or type name is kept, since that names
// the schema, not the data. Stored texts (a dead letter's last error) keep
// Postgres's message whole: use Short for those.
func ForLog(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	for _, pe := range pgErrors(err, nil) {
		s = strings.ReplaceAll(s, pe.Error(), pe.Severity+": "+maskQuoted(pe)+" (SQLSTATE "+pe.Code+")")
	}
	return Short(s)
}

// pgErrors appends every *pgconn.PgError in err's tree to out.
func pgErrors(err error, out []*pgconn.PgError) []*pgconn.PgError {
	if pe, ok := err.(*pgconn.PgError); ok {
		return append(out, pe)
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if next := u.Unwrap(); next != nil {
			return pgErrors(next, out)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil {
				out = pgErrors(e, out)
			}
		}
	}
	return out
}

// maskQuoted returns pe's message with every "…" or '…' part replaced by
// "***", except the names the error itself reports.
func maskQuoted(pe *pgconn.PgError) string {
	names := map[string]bool{}
	for _, n := range []string{pe.SchemaName, pe.TableName, pe.ColumnName, pe.ConstraintName, pe.DataTypeName} {
		if n != "" {
			names[n] = true
		}
	}
	msg := pe.Message
	var b strings.Builder
	for {
		i := strings.IndexAny(msg, `"'`)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		q := msg[i]
		j := strings.IndexByte(msg[i+1:], q)
		if j < 0 { // unterminated: mask the rest
			b.WriteString(msg[:i+1])
			b.WriteString("***")
			return b.String()
		}
		inner := msg[i+1 : i+1+j]
		b.WriteString(msg[:i+1])
		if names[inner] {
			b.WriteString(inner)
		} else {
			b.WriteString("***")
		}
		b.WriteByte(q)
		msg = msg[i+2+j:]
	}
}
