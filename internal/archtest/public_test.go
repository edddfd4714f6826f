package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// publicAPI is every package a team may import: the handler API, the
// ingress, the migrations, the embeddable server and command line, and the
// test kit. Everything else is machinery under internal/, so that each
// exported name is a promise made on purpose.
var publicAPI = []string{"app", "bridge", "bridge/verify", "cli", "consumer", "hookbridgetest", "publisher", "schema"}

// publicPackages lists the module's importable packages that make up its
// API, slash-separated from root: directories with non-test Go files,
// outside internal/ trees, that are not commands. cmd/ holds the commands
// and the packages only they use, examples/ the examples; a package with
// no exported declaration (one that only holds files and their tests)
// promises nothing.
func publicPackages(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root))
		rel = strings.TrimPrefix(rel, "/")
		name := d.Name()
		if rel != "" && (name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			rel == "cmd" || rel == "examples") {
			return filepath.SkipDir
		}
		api, err := exportsAPI(path)
		if err != nil {
			return err
		}
		if api {
			out = append(out, rel)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// exportsAPI reports whether the non-test Go files in dir make a package
// other than main with at least one exported top-level declaration.
func exportsAPI(dir string) (bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return false, err
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			return false, err
		}
		if file.Name.Name == "main" {
			return false, nil
		}
		for _, decl := range file.Decls {
			if exported(decl) {
				return true, nil
			}
		}
	}
	return false, nil
}

func exported(decl ast.Decl) bool {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		return d.Recv == nil && d.Name.IsExported()
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					return true
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						return true
					}
				}
			}
		}
	}
	return false
}

// internalAliases returns "file: type X = pkg.Y" for each type alias in
// src that names a type of an internal package: a public type must be the
// package's own, or an internal change would change the public API.
func internalAliases(name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	imports := map[string]string{} // local name -> import path
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			local = im.Name.Name
		}
		imports[local] = path
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || !ts.Assign.IsValid() {
			return true
		}
		typ := ts.Type
		for {
			switch t := typ.(type) {
			case *ast.IndexExpr:
				typ = t.X
				continue
			case *ast.IndexListExpr:
				typ = t.X
				continue
			}
			break
		}
		sel, ok := typ.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		path := imports[pkg.Name]
		if strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/") {
			out = append(out, name+": type "+ts.Name.Name+" = "+pkg.Name+"."+sel.Sel.Name+" ("+path+")")
		}
		return true
	})
	return out, nil
}

// The module's API is exactly the public packages: a new importable
// package is a decision to make here, not a side effect of a new directory.
func TestPublicPackagesAreExactlyTheAPI(t *testing.T) {
	t.Parallel()
	got, err := publicPackages(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, publicAPI) {
		t.Errorf("public packages = %q, want %q; move machinery under internal/, or add a package a team imports to publicAPI", got, publicAPI)
	}
}

// No public package declares an alias of an internal package's type.
func TestPublicTypesAreTheirPackagesOwn(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	files := 0
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
			found, err := internalAliases(filepath.ToSlash(strings.TrimPrefix(name, root+string(filepath.Separator))), src)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				t.Errorf("public alias of an internal type: %s; define the package's own type and convert", f)
			}
		}
	}
	if files < len(publicAPI) {
		t.Fatalf("only %d files read; the check would look at nothing", files)
	}
}

// Both checks catch what they forbid (made-up trees and source, so that a
// check that can never fire does not pass unnoticed).
func TestPublicAPIChecksCatchViolations(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, src string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("consumer/handler.go", "package consumer\n\ntype Event struct{}\n")
	write("ops/ops.go", "package ops\n\nfunc Replay() {}\n")                // machinery left importable
	write("internal/engine/engine.go", "package engine\n\nfunc New() {}\n") // internal: fine
	write("cmd/tool/main.go", "package main\n\nfunc Main() {}\n")           // a command: fine
	write("deploy/doc.go", "package deploy\n")                              // no API: fine
	write("schema/schema_test.go", "package schema\n\nfunc TestX() {}\n")   // tests only: fine
	got, err := publicPackages(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"consumer", "ops"}; !slices.Equal(got, want) {
		t.Errorf("publicPackages = %q, want %q", got, want)
	}

	src := "package consumer\n\nimport (\n\t\"time\"\n\n\t\"example.com/m/internal/store\"\n\tst \"example.com/m/internal/stream\"\n)\n\n" +
		"type DeadLetter = store.DeadLetter\n" +
		"type Options = st.Options[int]\n" +
		"type Duration = time.Duration\n" +
		"type Own store.DeadLetter\n"
	found, err := internalAliases("x.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"x.go: type DeadLetter = store.DeadLetter (example.com/m/internal/store)",
		"x.go: type Options = st.Options (example.com/m/internal/stream)",
	}
	if !slices.Equal(found, want) {
		t.Errorf("internalAliases = %q, want %q", found, want)
	}
}
