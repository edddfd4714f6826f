package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The public API names only public types: a team that calls an exported
// function of a public package, or reads an exported field, cannot name
// a type of an internal package (it cannot import it), so an API that
// hands one out is one it cannot use fully. The check reads the packages
// as the compiler does (go/types, over the export data `go list -export`
// writes), so it sees what the syntax does not: a variable's inferred
// type, the fields and methods a struct promotes from an embedded
// unexported one, and the exported fields of an unexported type a
// function returns.

// exports are the export data files of the module's public packages and
// everything they import, by import path, read once for every test.
var exports = sync.OnceValues(func() (map[string]string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"list", "-export", "-deps", "-json=ImportPath,Export"}
	for _, p := range publicAPI {
		args = append(args, module+"/"+p)
	}
	// The made-up violations name these.
	args = append(args, module+"/internal/ops", module+"/internal/store")
	cmd := exec.Command(goTool, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, stderr.String())
	}
	files := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list output: %w", err)
		}
		files[p.ImportPath] = p.Export
	}
	return files, nil
})

// typeCheck type-checks files as the package path, its imports read from
// their export data.
func typeCheck(t *testing.T, fset *token.FileSet, path string, files []*ast.File) *types.Package {
	t.Helper()
	data, err := exports()
	if err != nil {
		t.Fatal(err)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := data[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check(path, fset, files, nil)
	if err != nil {
		t.Fatalf("type-check %s: %v", path, err)
	}
	return pkg
}

// internalNames lists each exported declaration of pkg that names a type
// of an internal package, as "file: what names pkg.Type": a function's or
// method's parameters and results (methods a type promotes from an
// embedded field too), an exported field (promoted ones too), a
// variable's or constant's type however it was written, and, through an
// unexported type any of those names, that type's exported fields and
// methods. rel gives the file names.
func internalNames(fset *token.FileSet, pkg *types.Package, rel func(string) string) []string {
	var out []string
	seen := map[string]bool{}
	report := func(obj types.Object, what string) func(*types.TypeName) {
		return func(tn *types.TypeName) {
			s := fmt.Sprintf("%s: %s names %s.%s", rel(fset.Position(obj.Pos()).Filename), what, tn.Pkg().Name(), tn.Name())
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.TypeName:
			if obj.IsAlias() {
				walkType(types.Unalias(obj.Type()), report(obj, "type "+name), map[types.Type]bool{})
				continue
			}
			walkType(obj.Type().Underlying(), report(obj, name+" field"), map[types.Type]bool{})
			walkMethods(obj.Type(), name+".", func(what string) func(*types.TypeName) { return report(obj, what) })
		default: // functions, variables, constants
			walkType(obj.Type(), report(obj, name), map[types.Type]bool{})
		}
	}
	return out
}

// walkMethods walks the signatures of the exported methods of t and *t,
// promoted ones included.
func walkMethods(t types.Type, prefix string, report func(what string) func(*types.TypeName)) {
	ms := types.NewMethodSet(types.NewPointer(t))
	for i := range ms.Len() {
		m := ms.At(i).Obj()
		if m.Exported() {
			walkType(m.Type(), report(prefix+m.Name()), map[types.Type]bool{})
		}
	}
}

// walkType calls found for every type of an internal package that t
// shows a caller: itself, its elements, a signature's parameters and
// results, a struct's exported and embedded fields, an interface's
// methods, a generic type's arguments, and the exported fields and
// methods of an unexported type of the module. An exported type of the
// module is not entered: it is checked as a declaration of its own.
func walkType(t types.Type, found func(*types.TypeName), seen map[types.Type]bool) {
	if t == nil || seen[t] {
		return
	}
	seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		walkType(types.Unalias(t), found, seen)
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return // error, comparable
		}
		for i := range t.TypeArgs().Len() {
			walkType(t.TypeArgs().At(i), found, seen)
		}
		path := obj.Pkg().Path()
		if internalPath(path) {
			found(obj)
			return
		}
		if obj.Exported() || (path != module && !strings.HasPrefix(path, module+"/")) {
			return
		}
		walkType(t.Underlying(), found, seen)
		ms := types.NewMethodSet(types.NewPointer(t))
		for i := range ms.Len() {
			if m := ms.At(i).Obj(); m.Exported() {
				walkType(m.Type(), found, seen)
			}
		}
	case *types.Pointer:
		walkType(t.Elem(), found, seen)
	case *types.Slice:
		walkType(t.Elem(), found, seen)
	case *types.Array:
		walkType(t.Elem(), found, seen)
	case *types.Chan:
		walkType(t.Elem(), found, seen)
	case *types.Map:
		walkType(t.Key(), found, seen)
		walkType(t.Elem(), found, seen)
	case *types.Signature:
		for _, tuple := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tuple.Len() {
				walkType(tuple.At(i).Type(), found, seen)
			}
		}
	case *types.Struct:
		for i := range t.NumFields() {
			f := t.Field(i)
			switch {
			case f.Embedded():
				walkEmbedded(f.Type(), found, seen)
			case f.Exported():
				walkType(f.Type(), found, seen)
			}
		}
	case *types.Interface:
		for i := range t.NumMethods() {
			if m := t.Method(i); m.Exported() {
				walkType(m.Type(), found, seen)
			}
		}
	}
}

// walkEmbedded walks an embedded field's type for the fields it promotes;
// the methods it promotes are in the embedding type's method set, walked
// with it.
func walkEmbedded(t types.Type, found func(*types.TypeName), seen map[types.Type]bool) {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Exported() || internalPath(n.Obj().Pkg().Path()) {
		walkType(t, found, seen) // an exported or internal type: as any field's
		return
	}
	walkType(n.Underlying(), found, seen) // seen stops a struct that embeds itself through a pointer
}

func internalPath(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// No exported declaration of a public package names an internal type.
func TestPublicSignaturesNameOnlyPublicTypes(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	rel := func(name string) string {
		r, err := filepath.Rel(root, name)
		if err != nil {
			return name
		}
		return filepath.ToSlash(r)
	}
	for _, p := range publicAPI {
		fset := token.NewFileSet()
		files := parseDir(t, fset, filepath.Join(root, filepath.FromSlash(p)))
		if len(files) == 0 {
			t.Fatalf("%s: no files read; the check would look at nothing", p)
		}
		pkg := typeCheck(t, fset, module+"/"+p, files)
		if pkg.Scope().Len() == 0 {
			t.Fatalf("%s declares nothing; the check would look at nothing", p)
		}
		for _, f := range internalNames(fset, pkg, rel) {
			t.Errorf("%s; give it a public type of the package's own, or unexport it", f)
		}
	}
}

// The signature check catches each kind of declaration it is for, the
// three the syntax alone cannot see included, and nothing else.
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
func (s *Status) Read(o ops.ReplaySelectors)                    {}
func (s *Status) fine(o ops.ReplaySelectors)                    {}
func Fine(ctx context.Context) error                            { return nil }

var Default ops.ReplaySelectors

// What the syntax cannot see: an inferred type,
var Inferred = ops.PauseResult{}

// a field and a method promoted from an embedded unexported struct,
type inner struct{ Plan *ops.ReplayPlan }

func (inner) Result() ops.DeleteResult { return ops.DeleteResult{} }

type Outer struct{ inner }

// and an unexported result whose exported fields name internal types.
type view struct {
	Page   ops.Page[ops.OutboxView]
	hidden ops.Consumer
}

func Read() view { return view{} }

// Not violations: internal types in bodies and unexported places only.
type shown struct{ N int }

func Shown() shown {
	_ = ops.ReplaySelectors{}
	return shown{}
}

func (o Outer) unexported() ops.Consumer { return ops.Consumer{} }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "app/x.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	pkg := typeCheck(t, fset, module+"/app", []*ast.File{f})
	got := internalNames(fset, pkg, func(name string) string { return name })
	want := []string{
		"app/x.go: Default names ops.ReplaySelectors",
		"app/x.go: Inferred names ops.PauseResult",
		"app/x.go: OpsConsumers names ops.Consumer",
		"app/x.go: Outer field names ops.ReplayPlan",
		"app/x.go: Outer.Result names ops.DeleteResult",
		"app/x.go: Read names ops.OutboxView",
		"app/x.go: Read names ops.Page",
		"app/x.go: Status field names store.Failure",
		"app/x.go: Status.Read names ops.ReplaySelectors",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("found %q\nwant  %q", got, want)
	}
}
