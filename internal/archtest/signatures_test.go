package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// internalNames lists, for one file of a public package, each exported
// declaration whose signature names a type of an internal package: a
// function's parameters and results, a method's of an exported type, an
// exported field of an exported struct, an exported variable's type. A
// team that calls such a function cannot name what it gets (it cannot
// import internal/), so the API is one it cannot use fully.
func internalNames(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	internal := map[string]string{} // import name → path, internal ones only
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		if !strings.Contains("/"+path+"/", "/internal/") {
			continue
		}
		n := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			n = im.Name.Name
		}
		internal[n] = path
	}
	if len(internal) == 0 {
		return nil, nil
	}
	var out []string
	check := func(what string, e ast.Expr) {
		if e == nil {
			return
		}
		ast.Inspect(e, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] != "" {
					out = append(out, fmt.Sprintf("%s: %s names %s.%s", name, what, id.Name, sel.Sel.Name))
				}
				return false
			}
			return true
		})
	}
	checkFields := func(what string, fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, fld := range fl.List {
			check(what, fld.Type)
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			what := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) > 0 {
				recv := recvName(d.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue
				}
				what = recv + "." + what
			}
			checkFields(what, d.Type.Params)
			checkFields(what, d.Type.Results)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					switch t := s.Type.(type) {
					case *ast.StructType:
						for _, fld := range t.Fields.List {
							exported := len(fld.Names) == 0 // embedded
							for _, n := range fld.Names {
								exported = exported || n.IsExported()
							}
							if exported {
								check(s.Name.Name+" field", fld.Type)
							}
						}
					case *ast.InterfaceType:
						for _, m := range t.Methods.List {
							check(s.Name.Name+" method", m.Type)
						}
					default:
						if s.Assign == 0 { // aliases: TestPublicTypesAreTheirPackagesOwn
							check("type "+s.Name.Name, s.Type)
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							check(n.Name, s.Type)
						}
					}
				}
			}
		}
	}
	return out, nil
}

// knownInternalNames are the declarations that still name internal
// types. A new entry is a regression, not a decision: fix the signature
// instead.
var knownInternalNames = map[string]bool{}

// No exported declaration of a public package names an internal type.
func TestPublicSignaturesNameOnlyPublicTypes(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	files := 0
	seen := map[string]bool{}
	for _, p := range publicAPI {
		names, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(p), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			files++
			rel, _ := filepath.Rel(root, name)
			found, err := internalNames(filepath.ToSlash(rel), src)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				if knownInternalNames[f] {
					seen[f] = true
					continue
				}
				t.Errorf("%s; give it a public type of the package's own, or unexport it", f)
			}
		}
	}
	if files < len(publicAPI) {
		t.Fatalf("only %d files read; the check would look at nothing", files)
	}
	for k := range knownInternalNames {
		if !seen[k] {
			t.Errorf("fixed: %s; remove it from knownInternalNames", k)
		}
	}
}

// The signature check catches each kind of declaration it is for.
func TestPublicSignatureCheckCatchesViolations(t *testing.T) {
	t.Parallel()
	src := `package app

import (
	"context"

	"github.com/hookbridge/hookbridge/internal/ops"
	st "github.com/hookbridge/hookbridge/internal/store"
)

type Status struct {
	Retrying []st.Failure
	hidden   st.Failure
}

func OpsConsumers(ctx context.Context) ([]ops.Consumer, error) { return nil, nil }
func (s *Status) Read(o ops.Options) {}
func (s *Status) fine(o ops.Options) {}
func Fine(ctx context.Context) error { return nil }
var Default ops.Options
`
	got, err := internalNames("app/x.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"app/x.go: Status field names st.Failure",
		"app/x.go: OpsConsumers names ops.Consumer",
		"app/x.go: Status.Read names ops.Options",
		"app/x.go: Default names ops.Options",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("found %q\nwant  %q", got, want)
	}
}
