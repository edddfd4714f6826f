package sqlconsumer

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// The named arguments a statement may use. Every one is bound as a
// parameter in text form, never interpolated, so Postgres reads it as the
// type the statement gives it (@stream_seq as bigint in a bigint column,
// @received_at as timestamptz, @body::jsonb as JSON).
const (
	ArgBody       = "body"        // the raw webhook body, as text; cast it with ::jsonb
	ArgEventID    = "event_id"    // the sender's event id
	ArgEventType  = "event_type"  // the event type as the sender spells it
	ArgSource     = "source"      // the configured source name
	ArgConsumer   = "consumer"    // this consumer's name
	ArgStreamSeq  = "stream_seq"  // the message's sequence in the HOOKS stream
	ArgReceivedAt = "received_at" // when the ingress received the webhook (RFC 3339, UTC, microseconds)
)

// Args lists every argument name, in the order of the constants.
var Args = []string{ArgBody, ArgEventID, ArgEventType, ArgSource, ArgConsumer, ArgStreamSeq, ArgReceivedAt}

func knownArg(name string) bool {
	for _, a := range Args {
		if a == name {
			return true
		}
	}
	return false
}

// statement is one configured statement, rewritten once: its @names
// replaced by $1…$n (by pgx's own NamedArgs rewriter, so the lexing of
// strings, comments and quoted identifiers is pgx's), and the name bound
// to each ordinal.
type statement struct {
	text  string   // as configured
	sql   string   // with $n placeholders
	names []string // names[i] is bound to $(i+1)
}

// parseStatement rewrites text and refuses a name that is not in [Args].
func parseStatement(text string) (statement, error) {
	if strings.TrimSpace(text) == "" {
		return statement{}, fmt.Errorf("empty statement")
	}
	if kw := firstKeyword(text); txControl[kw] {
		// The statements run inside the transaction that also holds the
		// inbox claim: ending it would break the exactly-once effect.
		return statement{}, fmt.Errorf("%s: transaction control is hookbridge's (the statements run inside the inbox transaction)", strings.ToUpper(kw))
	}
	na := pgx.NamedArgs{}
	sql, args, err := na.RewriteQuery(context.Background(), nil, text, nil)
	if err != nil {
		return statement{}, fmt.Errorf("named arguments: %w", err)
	}
	names, ok := placeholderNames(text, sql, len(args))
	if !ok {
		// Cannot happen with pgx's rewriter, which changes nothing but
		// the placeholders; refuse rather than bind the wrong values.
		return statement{}, fmt.Errorf("named arguments: cannot map the rewritten statement back to its names")
	}
	var unknown []string
	for _, n := range names {
		if !knownArg(n) {
			unknown = append(unknown, "@"+n)
		}
	}
	if len(unknown) > 0 {
		return statement{}, fmt.Errorf("unknown argument %s (the arguments are @%s)", strings.Join(unknown, ", "), strings.Join(Args, ", @"))
	}
	return statement{text: text, sql: sql, names: names}, nil
}

// placeholderNames walks text and its rewrite side by side: they are equal
// except where "@name" became "$n". It returns the name of each ordinal.
func placeholderNames(text, sql string, n int) ([]string, bool) {
	names := make([]string, n)
	i, j := 0, 0
	for i < len(text) && j < len(sql) {
		if text[i] == sql[j] {
			i++
			j++
			continue
		}
		if text[i] != '@' || sql[j] != '$' {
			return nil, false
		}
		start := i + 1
		i = start
		for i < len(text) {
			r, w := utf8.DecodeRuneInString(text[i:])
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' {
				break
			}
			i += w
		}
		j++
		ord := 0
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			ord = ord*10 + int(sql[j]-'0')
			j++
		}
		if ord < 1 || ord > n || i == start {
			return nil, false
		}
		name := text[start:i]
		if names[ord-1] != "" && names[ord-1] != name {
			return nil, false
		}
		names[ord-1] = name
	}
	if i != len(text) || j != len(sql) {
		return nil, false
	}
	for _, name := range names {
		if name == "" {
			return nil, false
		}
	}
	return names, true
}

// txControl are the first keywords of statements that would end or split
// the inbox transaction.
var txControl = map[string]bool{
	"begin": true, "start": true, "commit": true, "end": true, "rollback": true, "abort": true,
	"savepoint": true, "release": true, "prepare": true,
}

// firstKeyword is the statement's first word, lower-cased, after white
// space, comments and opening parentheses.
func firstKeyword(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n(")
		switch {
		case strings.HasPrefix(s, "--"):
			if k := strings.IndexByte(s, '\n'); k >= 0 {
				s = s[k+1:]
				continue
			}
			return ""
		case strings.HasPrefix(s, "/*"):
			if k := strings.Index(s, "*/"); k >= 0 {
				s = s[k+2:]
				continue
			}
			return ""
		}
		end := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && r != '_' })
		if end < 0 {
			end = len(s)
		}
		return strings.ToLower(s[:end])
	}
}
