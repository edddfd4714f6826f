package store

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every embedded statement file is loaded by a variable (init refuses
// otherwise), and loading drops the comment lines only.
func TestStatementsLoaded(t *testing.T) {
	if err := unusedFiles(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sqlOutboxClaim, "--") || !strings.HasPrefix(sqlOutboxClaim, "SELECT id, event_id") {
		t.Fatalf("outbox claim loaded as %q", sqlOutboxClaim)
	}
}

// statementsOnlyInside are statements that have no function of their own:
// they run inside a function named for what its statements do together.
var statementsOnlyInside = map[string]string{
	"session_set_idle_timeout": "OutboxClaim",
	"outbox_pack_list_ahead":   "OutboxKeyHeadsAndPacksAhead",
	"failure_clear_many":       "QueueFailureClear",
}

// goName is the Go spelling of a statement's file name: outbox_get_by_id
// is OutboxGetByID.
func goName(file string) string {
	var b strings.Builder
	for _, w := range strings.Split(file, "_") {
		switch w {
		case "id":
			b.WriteString("ID")
		case "ids":
			b.WriteString("IDs")
		default:
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// A statement has one name: its file x_y.sql, its variable sqlXY and the
// function XY that runs it (or QueueXY, which queues it into a batch).
func TestStatementsShareOneName(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]bool{}
	vars := map[string]string{} // variable -> file, without .sql
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					funcs[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					v, ok := s.(*ast.ValueSpec)
					if !ok || len(v.Values) != 1 {
						continue
					}
					call, ok := v.Values[0].(*ast.CallExpr)
					if !ok || len(call.Args) != 1 || fmt.Sprint(call.Fun) != "load" {
						continue
					}
					lit, ok := call.Args[0].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: load of a non-literal file name", fset.Position(call.Pos()))
					}
					file, _ := strconv.Unquote(lit.Value)
					vars[v.Names[0].Name] = strings.TrimSuffix(file, ".sql")
				}
			}
		}
	}
	if len(vars) < 50 {
		t.Fatalf("found %d statement variables; the scan looks at the wrong files", len(vars))
	}
	for v, file := range vars {
		name := goName(file)
		if v != "sql"+name {
			t.Errorf("statement %s.sql is in variable %s, want sql%s", file, v, name)
		}
		if in, ok := statementsOnlyInside[file]; ok {
			if !funcs[in] {
				t.Errorf("statement %s.sql: function %s that runs it is gone", file, in)
			}
			continue
		}
		if !funcs[name] && !funcs["Queue"+name] {
			t.Errorf("statement %s.sql has no function %s (or Queue%s)", file, name, name)
		}
	}
}
