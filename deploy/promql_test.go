package deploy_test

// A small PromQL checker: a lexer and a recursive-descent parser for the
// language as Prometheus documents it (selectors, range and subquery
// selectors, offset and @, functions and aggregations with their argument
// types, binary operators with their precedence, bool, on/ignoring and
// group_left/right). It reports the metric names an expression selects.
// It is enough to catch what goes wrong in hand-written dashboards (an
// unbalanced bracket, rate of an instant vector, a misspelt function or
// metric) without importing the Prometheus server module for its parser.

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tNumber
	tDuration
	tString
	tPunct // ( ) { } [ ] , : @
	tOp    // + - * / % ^ == != > < >= <= =~ !~ =
)

type token struct {
	kind tokKind
	text string
	pos  int
}

var durationRE = regexp.MustCompile(`^(\d+(ms|s|m|h|d|w|y))+$`)

func lex(src string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("at %d: unterminated string", i)
			}
			s := src[i : j+1]
			if c == '`' {
				s = strconv.Quote(s[1 : len(s)-1])
			} else if c == '\'' {
				s = strconv.Quote(strings.ReplaceAll(s[1:len(s)-1], `\'`, `'`))
			}
			v, err := strconv.Unquote(s)
			if err != nil {
				return nil, fmt.Errorf("at %d: bad string %s: %w", i, src[i:j+1], err)
			}
			toks = append(toks, token{tString, v, i})
			i = j + 1
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			j := i
			for j < len(src) && (isWord(src[j]) || src[j] == '.' ||
				(src[j] == '+' || src[j] == '-') && (src[j-1] == 'e' || src[j-1] == 'E') && !strings.HasPrefix(src[i:], "0x")) {
				j++
			}
			w := src[i:j]
			if durationRE.MatchString(w) {
				toks = append(toks, token{tDuration, w, i})
			} else if _, err := strconv.ParseFloat(w, 64); err == nil {
				toks = append(toks, token{tNumber, w, i})
			} else if _, err := strconv.ParseInt(w, 0, 64); err == nil {
				toks = append(toks, token{tNumber, w, i})
			} else {
				return nil, fmt.Errorf("at %d: bad number or duration %q", i, w)
			}
			i = j
		case isWord(c):
			j := i
			for j < len(src) && (isWord(src[j]) || src[j] == ':') {
				j++
			}
			toks = append(toks, token{tIdent, src[i:j], i})
			i = j
		case strings.ContainsRune("(){}[],@", rune(c)):
			toks = append(toks, token{tPunct, string(c), i})
			i++
		case c == ':':
			toks = append(toks, token{tPunct, ":", i})
			i++
		default:
			two := ""
			if i+1 < len(src) {
				two = src[i : i+2]
			}
			switch {
			case slices.Contains([]string{"==", "!=", ">=", "<=", "=~", "!~"}, two):
				toks = append(toks, token{tOp, two, i})
				i += 2
			case strings.ContainsRune("+-*/%^<>=", rune(c)):
				toks = append(toks, token{tOp, string(c), i})
				i++
			default:
				return nil, fmt.Errorf("at %d: unexpected character %q", i, c)
			}
		}
	}
	return append(toks, token{tEOF, "", len(src)}), nil
}

func isWord(c byte) bool {
	return c == '_' || c < 0x80 && (unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)))
}

// valueType is the type of a PromQL expression.
type valueType int

const (
	tyScalar valueType = iota
	tyVector
	tyMatrix
	tyString
)

func (v valueType) String() string {
	return [...]string{"a scalar", "an instant vector", "a range vector", "a string"}[v]
}

// function is a function's argument types; variadic repeats the last one,
// optional counts the trailing arguments that may be left out.
type function struct {
	args     []valueType
	optional int
	variadic bool
	ret      valueType
}

var functions = func() map[string]function {
	S, V, M, Str := tyScalar, tyVector, tyMatrix, tyString
	f := map[string]function{
		"time":                         {nil, 0, false, S},
		"pi":                           {nil, 0, false, S},
		"scalar":                       {[]valueType{V}, 0, false, S},
		"vector":                       {[]valueType{S}, 0, false, V},
		"histogram_quantile":           {[]valueType{S, V}, 0, false, V},
		"histogram_fraction":           {[]valueType{S, S, V}, 0, false, V},
		"clamp":                        {[]valueType{V, S, S}, 0, false, V},
		"clamp_min":                    {[]valueType{V, S}, 0, false, V},
		"clamp_max":                    {[]valueType{V, S}, 0, false, V},
		"round":                        {[]valueType{V, S}, 1, false, V},
		"label_replace":                {[]valueType{V, Str, Str, Str, Str}, 0, false, V},
		"label_join":                   {[]valueType{V, Str, Str, Str}, 1, true, V},
		"sort_by_label":                {[]valueType{V, Str}, 1, true, V},
		"sort_by_label_desc":           {[]valueType{V, Str}, 1, true, V},
		"predict_linear":               {[]valueType{M, S}, 0, false, V},
		"quantile_over_time":           {[]valueType{S, M}, 0, false, V},
		"holt_winters":                 {[]valueType{M, S, S}, 0, false, V},
		"double_exponential_smoothing": {[]valueType{M, S, S}, 0, false, V},
	}
	for _, n := range strings.Fields(`abs absent ceil exp floor ln log2 log10 sqrt sgn sort sort_desc
		deg rad acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh
		histogram_count histogram_sum histogram_avg histogram_stddev histogram_stdvar`) {
		f[n] = function{[]valueType{V}, 0, false, V}
	}
	for _, n := range strings.Fields(`timestamp`) {
		f[n] = function{[]valueType{V}, 0, false, V}
	}
	for _, n := range strings.Fields(`day_of_month day_of_week day_of_year days_in_month hour minute month year`) {
		f[n] = function{[]valueType{V}, 1, false, V}
	}
	for _, n := range strings.Fields(`rate irate increase delta idelta deriv changes resets absent_over_time
		present_over_time avg_over_time min_over_time max_over_time sum_over_time count_over_time
		last_over_time stddev_over_time stdvar_over_time mad_over_time`) {
		f[n] = function{[]valueType{M}, 0, false, V}
	}
	return f
}()

// aggregations maps each aggregation operator to whether it takes a
// parameter before the vector, and the parameter's type.
var aggregations = map[string]*valueType{
	"sum": nil, "avg": nil, "min": nil, "max": nil, "group": nil, "count": nil, "stddev": nil, "stdvar": nil,
	"topk": ptr(tyScalar), "bottomk": ptr(tyScalar), "quantile": ptr(tyScalar), "limitk": ptr(tyScalar),
	"limit_ratio": ptr(tyScalar), "count_values": ptr(tyString),
}

func ptr(v valueType) *valueType { return &v }

// binary operators by precedence, lowest first.
var precedence = [][]string{
	{"or"},
	{"and", "unless"},
	{"==", "!=", "<=", "<", ">=", ">"},
	{"+", "-"},
	{"*", "/", "%", "atan2"},
	{"^"},
}

var keywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}

type parser struct {
	toks    []token
	i       int
	metrics []string
}

// parsePromQL checks expr and returns the metric names it selects and its
// type.
func parsePromQL(expr string) ([]string, valueType, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, 0, err
	}
	p := &parser{toks: toks}
	t, err := p.expr(0)
	if err != nil {
		return nil, 0, err
	}
	if p.peek().kind != tEOF {
		return nil, 0, p.errf("unexpected %q after the expression", p.peek().text)
	}
	return p.metrics, t, nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }
func (p *parser) errf(format string, a ...any) error {
	return fmt.Errorf("at %d: %s", p.peek().pos, fmt.Sprintf(format, a...))
}

func (p *parser) is(kind tokKind, text string) bool {
	t := p.peek()
	return t.kind == kind && t.text == text
}

func (p *parser) expect(kind tokKind, text string) error {
	if !p.is(kind, text) {
		return p.errf("want %q, got %q", text, p.peek().text)
	}
	p.i++
	return nil
}

// binaryOp reports whether the next token is an operator of the level.
func (p *parser) binaryOp(level int) (string, bool) {
	t := p.peek()
	if t.kind != tOp && t.kind != tIdent {
		return "", false
	}
	op := t.text
	if t.kind == tIdent {
		op = strings.ToLower(op)
	}
	return op, slices.Contains(precedence[level], op)
}

func (p *parser) expr(level int) (valueType, error) {
	if level == len(precedence) {
		return p.unary()
	}
	lhs, err := p.expr(level + 1)
	if err != nil {
		return 0, err
	}
	for {
		op, ok := p.binaryOp(level)
		if !ok {
			return lhs, nil
		}
		p.next()
		isBool, err := p.modifiers(op)
		if err != nil {
			return 0, err
		}
		var rhs valueType
		if op == "^" { // right-associative
			rhs, err = p.expr(level)
		} else {
			rhs, err = p.expr(level + 1)
		}
		if err != nil {
			return 0, err
		}
		if lhs, err = p.binaryType(op, lhs, rhs, isBool); err != nil {
			return 0, err
		}
	}
}

func (p *parser) modifiers(op string) (isBool bool, err error) {
	comparison := slices.Contains(precedence[2], op)
	if p.is(tIdent, "bool") {
		if !comparison {
			return false, p.errf("bool modifies comparisons only, not %s", op)
		}
		p.next()
		isBool = true
	}
	if p.is(tIdent, "on") || p.is(tIdent, "ignoring") {
		p.next()
		if err := p.labelList(); err != nil {
			return false, err
		}
		if p.is(tIdent, "group_left") || p.is(tIdent, "group_right") {
			if op == "and" || op == "or" || op == "unless" {
				return false, p.errf("no grouping modifier on a set operator")
			}
			p.next()
			if p.is(tPunct, "(") {
				if err := p.labelList(); err != nil {
					return false, err
				}
			}
		}
	}
	return isBool, nil
}

func (p *parser) binaryType(op string, l, r valueType, isBool bool) (valueType, error) {
	if l == tyMatrix || r == tyMatrix || l == tyString || r == tyString {
		return 0, p.errf("operator %s on %s and %s", op, l, r)
	}
	if op == "and" || op == "or" || op == "unless" {
		if l != tyVector || r != tyVector {
			return 0, p.errf("set operator %s needs two instant vectors", op)
		}
		return tyVector, nil
	}
	if l == tyScalar && r == tyScalar {
		if slices.Contains(precedence[2], op) && !isBool {
			return 0, p.errf("comparison of two scalars needs bool")
		}
		return tyScalar, nil
	}
	return tyVector, nil
}

func (p *parser) unary() (valueType, error) {
	if p.is(tOp, "-") || p.is(tOp, "+") {
		p.next()
		t, err := p.unary()
		if err != nil {
			return 0, err
		}
		if t != tyScalar && t != tyVector {
			return 0, p.errf("unary minus of %s", t)
		}
		return t, nil
	}
	return p.postfix()
}

func (p *parser) postfix() (valueType, error) {
	start := p.peek()
	t, err := p.primary()
	if err != nil {
		return 0, err
	}
	for {
		switch {
		case p.is(tPunct, "["):
			p.next()
			if p.peek().kind != tDuration {
				return 0, p.errf("want a duration in [], got %q", p.peek().text)
			}
			p.next()
			subquery := false
			if p.is(tPunct, ":") {
				subquery = true
				p.next()
				if p.peek().kind == tDuration {
					p.next()
				}
			}
			if err := p.expect(tPunct, "]"); err != nil {
				return 0, err
			}
			switch {
			case subquery && t != tyVector:
				return 0, p.errf("subquery of %s", t)
			case !subquery && (t != tyVector || !selectorStart(start)):
				return 0, p.errf("a range [..] follows a metric selector only (use a subquery [range:step] otherwise)")
			}
			t = tyMatrix
		case p.is(tIdent, "offset"):
			p.next()
			if p.is(tOp, "-") {
				p.next()
			}
			if p.peek().kind != tDuration {
				return 0, p.errf("offset wants a duration")
			}
			p.next()
		case p.is(tPunct, "@"):
			p.next()
			if p.peek().kind == tNumber {
				p.next()
			} else if p.is(tIdent, "start") || p.is(tIdent, "end") {
				p.next()
				if err := p.expect(tPunct, "("); err != nil {
					return 0, err
				}
				if err := p.expect(tPunct, ")"); err != nil {
					return 0, err
				}
			} else {
				return 0, p.errf("@ wants a timestamp, start() or end()")
			}
		default:
			return t, nil
		}
	}
}

// selectorStart reports whether the expression that began at tok is a
// plain selector (a name or {), which a range may follow.
func selectorStart(tok token) bool {
	if tok.kind == tPunct && tok.text == "{" {
		return true
	}
	if tok.kind != tIdent {
		return false
	}
	_, fn := functions[tok.text]
	_, agg := aggregations[tok.text]
	return !fn && !agg
}

func (p *parser) primary() (valueType, error) {
	t := p.peek()
	switch t.kind {
	case tNumber:
		p.next()
		return tyScalar, nil
	case tString:
		p.next()
		return tyString, nil
	case tPunct:
		switch t.text {
		case "(":
			p.next()
			v, err := p.expr(0)
			if err != nil {
				return 0, err
			}
			return v, p.expect(tPunct, ")")
		case "{":
			return tyVector, p.selector("")
		}
		return 0, p.errf("unexpected %q", t.text)
	case tIdent:
		name := t.text
		lower := strings.ToLower(name)
		if lower == "inf" || lower == "nan" {
			p.next()
			return tyScalar, nil
		}
		if param, ok := aggregations[lower]; ok {
			p.next()
			return tyVector, p.aggregation(lower, param)
		}
		if p.toks[p.i+1].kind == tPunct && p.toks[p.i+1].text == "(" {
			fn, ok := functions[name]
			if !ok {
				return 0, p.errf("unknown function %s", name)
			}
			p.next()
			return fn.ret, p.call(name, fn)
		}
		if slices.Contains(keywords, lower) {
			return 0, p.errf("unexpected keyword %s", name)
		}
		p.next()
		return tyVector, p.selector(name)
	case tEOF:
		return 0, p.errf("unexpected end of expression")
	}
	return 0, p.errf("unexpected %q", t.text)
}

func (p *parser) selector(name string) error {
	if name != "" {
		p.metrics = append(p.metrics, name)
	}
	if !p.is(tPunct, "{") {
		return nil
	}
	p.next()
	nonEmpty := false
	for !p.is(tPunct, "}") {
		lt := p.next()
		if lt.kind != tIdent {
			return p.errf("want a label name, got %q", lt.text)
		}
		op := p.next()
		if op.kind != tOp || !slices.Contains([]string{"=", "!=", "=~", "!~"}, op.text) {
			return p.errf("want a label matcher operator after %s, got %q", lt.text, op.text)
		}
		val := p.next()
		if val.kind != tString {
			return p.errf("want a string after %s%s, got %q", lt.text, op.text, val.text)
		}
		if op.text == "=~" || op.text == "!~" {
			if _, err := regexp.Compile("^(?:" + val.text + ")$"); err != nil {
				return p.errf("label %s: bad regexp %q: %v", lt.text, val.text, err)
			}
		}
		if lt.text == "__name__" && op.text == "=" {
			p.metrics = append(p.metrics, val.text)
		}
		if !regexp.MustCompile(`^(?:` + matchesEmpty(op.text, val.text) + `)$`).MatchString("") {
			nonEmpty = true
		}
		if p.is(tPunct, ",") {
			p.next()
			continue
		}
		if !p.is(tPunct, "}") {
			return p.errf("want , or } in a selector, got %q", p.peek().text)
		}
	}
	p.next()
	if name == "" && !nonEmpty {
		return p.errf("a selector without a metric name needs a matcher that does not match the empty string")
	}
	return nil
}

// matchesEmpty returns a pattern that matches "" exactly when the matcher
// does.
func matchesEmpty(op, val string) string {
	switch op {
	case "=":
		return regexp.QuoteMeta(val)
	case "!=":
		if val == "" {
			return "x^" // never matches ""
		}
		return ""
	case "=~":
		return val
	default: // !~: matches "" when the regexp does not
		if regexp.MustCompile("^(?:" + val + ")$").MatchString("") {
			return "x^"
		}
		return ""
	}
}

func (p *parser) labelList() error {
	if err := p.expect(tPunct, "("); err != nil {
		return err
	}
	for !p.is(tPunct, ")") {
		if p.peek().kind != tIdent {
			return p.errf("want a label name, got %q", p.peek().text)
		}
		p.next()
		if p.is(tPunct, ",") {
			p.next()
		} else if !p.is(tPunct, ")") {
			return p.errf("want , or ) in a label list, got %q", p.peek().text)
		}
	}
	p.next()
	return nil
}

func (p *parser) aggregation(name string, param *valueType) error {
	grouping := func() error {
		if p.is(tIdent, "by") || p.is(tIdent, "without") {
			p.next()
			return p.labelList()
		}
		return nil
	}
	before := p.is(tIdent, "by") || p.is(tIdent, "without")
	if err := grouping(); err != nil {
		return err
	}
	if err := p.expect(tPunct, "("); err != nil {
		return err
	}
	if param != nil {
		t, err := p.expr(0)
		if err != nil {
			return err
		}
		if t != *param {
			return p.errf("%s's parameter is %s, not %s", name, *param, t)
		}
		if err := p.expect(tPunct, ","); err != nil {
			return err
		}
	}
	t, err := p.expr(0)
	if err != nil {
		return err
	}
	if t != tyVector {
		return p.errf("%s aggregates an instant vector, not %s", name, t)
	}
	if err := p.expect(tPunct, ")"); err != nil {
		return err
	}
	if !before {
		return grouping()
	}
	return nil
}

func (p *parser) call(name string, fn function) error {
	if err := p.expect(tPunct, "("); err != nil {
		return err
	}
	var got []valueType
	for !p.is(tPunct, ")") {
		t, err := p.expr(0)
		if err != nil {
			return err
		}
		got = append(got, t)
		if p.is(tPunct, ",") {
			p.next()
		} else if !p.is(tPunct, ")") {
			return p.errf("want , or ) in the arguments of %s, got %q", name, p.peek().text)
		}
	}
	p.next()
	minArgs := len(fn.args) - fn.optional
	if len(got) < minArgs || len(got) > len(fn.args) && !fn.variadic {
		return p.errf("%s takes %d to %d arguments, got %d", name, minArgs, len(fn.args), len(got))
	}
	for i, t := range got {
		want := fn.args[min(i, len(fn.args)-1)]
		if t != want {
			return p.errf("argument %d of %s is %s, want %s", i+1, name, t, want)
		}
	}
	return nil
}
