package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// The docs name the module's functions, types and subjects; each check
// below fails when one of them drifts from the code (a renamed function
// left in docs/OPERATIONS.md, a default changed in the code and not in
// the README), so the drift shows in CI instead of in a user's shell.

// pkgDecls is one package's declared names: "F", "T", "T.M" (methods,
// struct fields and interface methods).
type pkgDecls struct {
	path  string // import path
	name  string // package name
	names map[string]bool
}

// moduleDecls indexes the module's non-test packages by name (several
// packages may share one) and by import path.
type moduleDecls struct {
	byName map[string][]*pkgDecls
	byPath map[string]*pkgDecls
	files  []parsedFile
}

type parsedFile struct {
	rel  string // path from the module root
	pkg  *pkgDecls
	file *ast.File
}

func readDecls(t *testing.T, root string) *moduleDecls {
	t.Helper()
	m := &moduleDecls{byName: map[string][]*pkgDecls{}, byPath: map[string]*pkgDecls{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		ipath := module
		if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
			ipath += "/" + dir
		}
		p := m.byPath[ipath]
		if p == nil {
			p = &pkgDecls{path: ipath, name: f.Name.Name, names: map[string]bool{}}
			m.byPath[ipath] = p
			m.byName[p.name] = append(m.byName[p.name], p)
		}
		addDecls(p.names, f)
		m.files = append(m.files, parsedFile{rel: rel, pkg: p, file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.byPath) < 10 {
		t.Fatalf("only %d packages read under %s; the checks would look at nothing", len(m.byPath), root)
	}
	return m
}

// addDecls records the names f declares at top level.
func addDecls(names map[string]bool, f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				names[d.Name.Name] = true
				continue
			}
			if recv := recvName(d.Recv.List[0].Type); recv != "" {
				names[recv+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
					addMembers(names, s.Name.Name, s.Type)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
}

func addMembers(names map[string]bool, typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	}
	if fields == nil {
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			names[typ+"."+n.Name] = true
		}
		if len(f.Names) == 0 { // embedded: its name is the field's
			if n := recvName(f.Type); n != "" {
				names[typ+"."+n] = true
			}
		}
	}
}

// recvName is the type name of a receiver or embedded field: T, *T, T[P],
// pkg.T.
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// has reports whether a package named pkg in the module declares sym
// ("F", "T" or "T.M"); known is false when no package of the module has
// that name (a standard or third-party package: not checked here).
func (m *moduleDecls) has(pkg, sym string) (found, known bool) {
	ps := m.byName[pkg]
	for _, p := range ps {
		if p.names[sym] {
			return true, true
		}
	}
	return false, len(ps) > 0
}

// docSymbol is a name like consumer.Mux or engine.Options.WithDefaults in
// a Markdown code span.
// "verify.Scheme*" names a family of names, and is not checked.
var docSymbol = regexp.MustCompile(`(?:^|[^\w.])([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?(\*?)`)

// codeSpan is a Markdown code span or a fenced block of Go.
var codeSpan = regexp.MustCompile("(?s)```go\n.*?\n```|`[^`\n]+`")

// staleDocSymbols lists the code spans of a Markdown text that name a
// package of the module and a symbol it does not declare.
func staleDocSymbols(m *moduleDecls, text string) []string {
	var out []string
	for _, span := range codeSpan.FindAllString(text, -1) {
		for _, s := range docSymbol.FindAllStringSubmatch(span, -1) {
			pkg, sym := s[1], s[2]
			if s[3] != "" {
				sym += "." + s[3]
			}
			if s[4] != "" {
				continue
			}
			if found, known := m.has(pkg, sym); known && !found {
				out = append(out, pkg+"."+sym)
			}
		}
	}
	return out
}

// docLink is a Go doc link: [Name], [Type.Method], [pkg.Name] or
// [pkg.Type.Method], not followed by "(" or ":" (a Markdown link or a
// link definition) and not an index ("x[T]").
var docLink = regexp.MustCompile(`(?:^|[^\w\]])\[\*?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*){0,2})\]($|[^(:\w])`)

// staleDocLinks lists the doc links in f's comments that resolve to a
// package of the module (its own or one it could import by name) but
// to no symbol it declares.
func staleDocLinks(m *moduleDecls, pf parsedFile) []string {
	imports := map[string]string{} // name in the file → import path
	for _, im := range pf.file.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = path
	}
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for _, cg := range pf.file.Comments {
		text := cg.Text()
		// A name written without brackets, "(publisher.DefaultRetention)",
		// is read as one too: it is as stale when it is gone.
		for _, s := range docSymbol.FindAllStringSubmatch(text, -1) {
			pkg, sym := s[1], s[2]
			if s[3] != "" {
				sym += "." + s[3]
			}
			if _, local := imports[pkg]; (local && m.byPath[imports[pkg]] == nil) || s[4] != "" {
				continue
			}
			if found, known := m.has(pkg, sym); known && !found {
				add(pkg + "." + sym)
			}
		}
		for _, s := range docLink.FindAllStringSubmatch(text, -1) {
			parts := strings.Split(s[1], ".")
			if isLower(parts[0]) {
				if len(parts) == 1 {
					// [name]: plain text in brackets, or an unexported
					// name; one in camel case is a name, which the
					// package must declare.
					if strings.ToLower(s[1]) != s[1] && !pf.pkg.names[s[1]] {
						add(s[1])
					}
					continue
				}
				pkg, sym := parts[0], strings.Join(parts[1:], ".")
				if path, ok := imports[pkg]; ok {
					if p := m.byPath[path]; p != nil && !p.names[sym] {
						add(s[1])
					}
					continue // imported from outside the module: not ours to check
				}
				if found, known := m.has(pkg, sym); known && !found {
					add(s[1])
				}
				continue
			}
			if strings.ToUpper(parts[0]) == parts[0] {
				continue // [HOOKS], [TODO]: words in capitals, not names
			}
			if len(parts) <= 2 && !pf.pkg.names[s[1]] {
				add(s[1])
			}
		}
	}
	return out
}

func isLower(s string) bool { return s != "" && s[0] >= 'a' && s[0] <= 'z' }

// docFiles are the Markdown pages a user reads.
func docFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, filepath.Join(root, "README.md"))
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, n)
		out[filepath.ToSlash(rel)] = string(b)
	}
	if len(out) < 5 {
		t.Fatalf("only %d doc pages read", len(out))
	}
	return out
}

// The functions, types and methods the docs name exist.
func TestDocsNameSymbolsThatExist(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	m := readDecls(t, root)
	for name, text := range docFiles(t, root) {
		if name == "docs/PERFORMANCE-HISTORY.md" {
			continue // a record of past runs names the code of its day
		}
		for _, s := range staleDocSymbols(m, text) {
			t.Errorf("%s names %s, which the module does not declare", name, s)
		}
	}
}

// Every doc link in a Go comment resolves: go vet does not check them,
// and a stale one renders as plain text on pkg.go.dev without a warning.
func TestGoDocLinksResolve(t *testing.T) {
	t.Parallel()
	m := readDecls(t, moduleRoot(t))
	for _, pf := range m.files {
		for _, l := range staleDocLinks(m, pf) {
			t.Errorf("%s: doc link [%s] names nothing the module declares", pf.rel, l)
		}
	}
}

// goCommand is a go command in a page, and pkgPath a package directory
// it names ("./internal/admin/", "./cmd/hookbridge").
var (
	goCommand = regexp.MustCompile("`go (?:test|run|build|vet)[^`\n]*`")
	pkgPath   = regexp.MustCompile(`(?:^|\s)\./([\w./-]*?)(?:/\.\.\.)?/?(?:\s|$)`)
)

// missingDirs lists the package directories the page's go commands name
// that do not exist under root.
func missingDirs(root, text string) []string {
	var out []string
	for _, cmd := range goCommand.FindAllString(text, -1) {
		for _, m := range pkgPath.FindAllStringSubmatch(strings.Trim(cmd, "`"), -1) {
			if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil || !fi.IsDir() {
				out = append(out, "./"+m[1])
			}
		}
	}
	return out
}

// The go commands the docs give run packages that exist.
func TestDocsGoCommandsNameExistingPackages(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	cmds := 0
	for name, text := range docFiles(t, root) {
		if name == "docs/PERFORMANCE-HISTORY.md" {
			continue // a record of past runs names the tree of its day
		}
		cmds += len(goCommand.FindAllString(text, -1))
		for _, d := range missingDirs(root, text) {
			t.Errorf("%s: a go command names %s, which is no package directory", name, d)
		}
	}
	if cmds < 5 {
		t.Fatalf("only %d go commands found in the docs; the check would look at nothing", cmds)
	}
}

// placeholders stand for the parts of a documented subject.
var placeholders = strings.NewReplacer("<partition>", "3", "<p>", "3", "<source>", "demo", "<src>", "demo", "<type>", "order.created")

var hookSubject = regexp.MustCompile("`(hook[sp]\\.[^` ]+)`")

// subjectProblems checks one page's subjects: each hooks./hookp. subject
// it spells out is one the stream package would build, and a page that
// tells where unkeyed messages are stored (hooks.<source>...) also tells
// where keyed ones are (hookp.<p>...), since a reader subscribes or
// filters by what the page says.
func subjectProblems(text string) []string {
	var out []string
	for _, s := range hookSubject.FindAllStringSubmatch(text, -1) {
		subj := placeholders.Replace(s[1])
		if strings.ContainsAny(subj, "*><") || strings.HasSuffix(subj, ".") {
			continue // a filter or a prefix, not a subject
		}
		if _, _, _, ok := stream.SplitHookSubject(subj); !ok {
			out = append(out, fmt.Sprintf("%s is not a subject the ingress publishes to", s[1]))
		}
	}
	if strings.Contains(text, "hooks.<source>.<type>") && !strings.Contains(text, "hookp.<") {
		out = append(out, "names hooks.<source>.<type> as where webhooks are stored, but not hookp.<p>.<source>.<type>, where keyed sources' are")
	}
	return out
}

// documentedDefaults are the defaults the docs state, each with the
// value the code uses: "`partitions` (16: ..." in a page fails when the
// code says 8.
var documentedDefaults = []struct {
	re   *regexp.Regexp
	want string
}{
	{regexp.MustCompile("`partitions` \\((\\d+)"), strconv.Itoa(stream.DefaultPartitions)},
	{regexp.MustCompile(`partitions:\s*(\d+)\s*#\s*default`), strconv.Itoa(stream.DefaultPartitions)},
}

func defaultProblems(text string) []string {
	var out []string
	for _, d := range documentedDefaults {
		for _, s := range d.re.FindAllStringSubmatch(text, -1) {
			if s[1] != d.want {
				out = append(out, fmt.Sprintf("%q states %s; the code uses %s", s[0], s[1], d.want))
			}
		}
	}
	return out
}

// The subjects and defaults the docs state are the code's.
func TestDocsStateTheCodesSubjectsAndDefaults(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	pages := docFiles(t, root)
	if b, err := os.ReadFile(filepath.Join(root, "examples", "hookbridge.yaml")); err == nil {
		pages["examples/hookbridge.yaml"] = string(b)
	} else {
		t.Fatal(err)
	}
	for name, text := range pages {
		for _, p := range slices.Concat(subjectProblems(text), defaultProblems(text)) {
			t.Errorf("%s: %s", name, p)
		}
	}
}

// Each doc check catches the drift it is for (made-up pages and source,
// so that a check that can never fire does not pass unnoticed).
func TestDocChecksCatchDrift(t *testing.T) {
	t.Parallel()
	m := readDecls(t, moduleRoot(t))
	if got := staleDocSymbols(m, "The library function is `consumer.Replay(ctx, pool, js, ReplayOptions)`; see `consumer.Mux` and `slog.Logger`."); !slices.Equal(got, []string{"consumer.Replay"}) {
		t.Errorf("stale symbols = %q, want [consumer.Replay]", got)
	}
	src := `package consumer

import "log/slog"

// X uses [Mux], [MaxBatch], [Options.WithDefaults], [slog.Logger],
// [eventName], [handleRun] and [publisher.RelayOptions]; a map[K]V, a
// [link](http://x) and [a note] are text.
func X(*slog.Logger) {}
`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	pf := parsedFile{rel: "consumer/x.go", pkg: m.byPath[module+"/consumer"], file: f}
	if pf.pkg == nil {
		t.Fatal("no consumer package read")
	}
	got := staleDocLinks(m, pf)
	slices.Sort(got)
	if want := []string{"MaxBatch", "Options.WithDefaults", "handleRun", "publisher.RelayOptions"}; !slices.Equal(got, want) {
		t.Errorf("stale links = %q, want %q", got, want)
	}
	if got := subjectProblems("stored on `hooks.<source>.<type>`, filtered by `hooks.<src>.order.created` or `hooks.x`"); len(got) != 2 {
		t.Errorf("subject problems = %q, want a malformed subject and the missing keyed form", got)
	}
	if got := missingDirs(moduleRoot(t), "run `go test -run 'TestConsole' ./admin/` or `go test ./internal/admin/ ./cmd/hookbridge`"); !slices.Equal(got, []string{"./admin"}) {
		t.Errorf("missing dirs = %q, want [./admin]", got)
	}
	if got := defaultProblems("`partitions` (16: how many"); len(got) != 1 {
		t.Errorf("default problems = %q, want the wrong partitions default", got)
	}
}
