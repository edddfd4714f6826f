package sqlconsumer

import (
	"slices"
	"strings"
	"testing"
)

func TestParseStatementBindsNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		text, sql string
		names     []string
	}{
		{"SELECT @body::jsonb #>> '{a}', @event_id", "SELECT $1::jsonb #>> '{a}', $2", []string{"body", "event_id"}},
		// A repeated name is one parameter.
		{"SELECT @source || ':' || @event_id || @source", "SELECT $1 || ':' || $2 || $1", []string{"source", "event_id"}},
		// Not names: strings, quoted identifiers, comments, operators.
		{"SELECT 'a@b.com', \"@x\", @stream_seq -- @nope\n, '{}'::jsonb @> '{}' /* @no */",
			"SELECT 'a@b.com', \"@x\", $1 -- @nope\n, '{}'::jsonb @> '{}' /* @no */", []string{"stream_seq"}},
		{"INSERT INTO t VALUES (@received_at, @consumer, @event_type)", "INSERT INTO t VALUES ($1, $2, $3)", []string{"received_at", "consumer", "event_type"}},
	} {
		st, err := parseStatement(c.text)
		if err != nil {
			t.Errorf("%q: %v", c.text, err)
			continue
		}
		if st.sql != c.sql || !slices.Equal(st.names, c.names) {
			t.Errorf("%q:\n got  %q %q\n want %q %q", c.text, st.sql, st.names, c.sql, c.names)
		}
	}
}

func TestParseStatementRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ text, want string }{
		{"SELECT @body, @issue_id, @Body", "unknown argument @issue_id, @Body (the arguments are @body, @event_id"},
		{"  ", "empty statement"},
		{"COMMIT", "transaction control"},
		{"-- done\n  rollback", "transaction control"},
		{"/* x */ SAVEPOINT a", "transaction control"},
	} {
		_, err := parseStatement(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.text, err, c.want)
		}
	}
}

func TestNewNamesTheRule(t *testing.T) {
	t.Parallel()
	_, err := New("tickets", map[string][]string{
		"issues.opened": {"SELECT 1", "SELECT @title"},
		"issues.closed": {},
		"*":             {"SELECT @body"},
	})
	for _, want := range []string{`apply "issues.opened", statement 2: unknown argument @title`, `apply "issues.closed": no statement`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	_, err = New("tickets", map[string][]string{"orders/create": {"SELECT 1"}, "orders.create": {"SELECT 1"}})
	if err == nil || !strings.Contains(err.Error(), "same subject") && !strings.Contains(err.Error(), "subject tokens") {
		t.Errorf("two spellings of one subject: err = %v", err)
	}
	h, err := New("tickets", map[string][]string{"orders.create": {"SELECT 1"}, "*": {"SELECT 2"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.Types(), []string{"orders.create"}) || !h.HasFallback() || !h.Covers("orders/create") || !h.Covers("x") {
		t.Errorf("types %v, fallback %v", h.Types(), h.HasFallback())
	}
}
