package errtext

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"strings"
	"testing"
	"unicode/utf8"
)

func TestShort(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"two\nlines\t and  tabs", "two lines and tabs"},
		{"dial postgres://user:secret@db:5432/x failed", "dial postgres://***@db:5432/x failed"},
		{"nats://tok@127.0.0.1:4222 down", "nats://***@127.0.0.1:4222 down"},
		{"bell\x07 and del\x7f", "bell and del"},
	}
	for _, c := range cases {
		if got := Short(c.in); got != c.want {
			t.Errorf("Short(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestShortBoundsAndKeepsUTF8(t *testing.T) {
	long := strings.Repeat("é", MaxLen) // 2 bytes each
	got := Short(long)
	if len(got) > MaxLen+len("…") || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("Short(long) = %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := Short("bad \xff byte"); !utf8.ValidString(got) {
		t.Fatalf("Short kept invalid UTF-8: %q", got)
	}
}

func TestForLogMasksPostgresValues(t *testing.T) {
	dataErr := &pgconn.PgError{Severity: "ERROR", Code: "22P02", Message: `invalid input syntax for type bigint: "card-4111"`}
	notNull := &pgconn.PgError{Severity: "ERROR", Code: "23502", Message: `null value in column "title" of relation "tickets" violates not-null constraint`,
		TableName: "tickets", ColumnName: "title"}
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("apply: %w", dataErr), `apply: ERROR: invalid input syntax for type bigint: "***" (SQLSTATE 22P02)`},
		{fmt.Errorf("apply: %w", notNull), `apply: ERROR: null value in column "title" of relation "tickets" violates not-null constraint (SQLSTATE 23502)`},
		{errors.Join(errors.New("first"), fmt.Errorf("second: %w", &pgconn.PgError{Severity: "ERROR", Code: "22003",
			Message: `value "99999999999" is out of range for type integer`})), `first second: ERROR: value "***" is out of range for type integer (SQLSTATE 22003)`},
		{&pgconn.PgError{Severity: "ERROR", Code: "P0001", Message: `it's 'open`}, `ERROR: it'***'open (SQLSTATE P0001)`},
		{&pgconn.PgError{Severity: "ERROR", Code: "P0001", Message: `bad "x`}, `ERROR: bad "*** (SQLSTATE P0001)`},
		{errors.New("plain"), "plain"},
	}
	for _, c := range cases {
		if got := ForLog(c.err); got != c.want {
			t.Errorf("ForLog(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if ForLog(nil) != "" {
		t.Error("ForLog(nil) is not empty")
	}
}
