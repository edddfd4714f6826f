package archtest

import (
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A dead letter's reason is written in three places that cannot share
// one definition: the engine's Reason constants (what it records), the
// dead_letters table's CHECK (what Postgres accepts, as the latest
// migration that sets it leaves it) and the list in docs/OPERATIONS.md
// (what an operator reads the reason column by). A reason added to one
// and not to the others fails here.

// engineReasons are the values of the string constants named Reason* in
// the engine's non-test files.
func engineReasons(t *testing.T, root string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var out []string
	for _, f := range parseDir(t, fset, filepath.Join(root, "internal", "engine")) {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatalf("%s: %v", name.Name, err)
					}
					out = append(out, v)
				}
			}
			return false
		})
	}
	slices.Sort(out)
	return out
}

var reasonCheck = regexp.MustCompile(`dead_letters_reason_check\s+CHECK\s*\(\s*reason\s+IN\s*\(([^)]*)\)`)

// schemaReasons are the reasons the last migration that sets the
// dead_letters reason CHECK allows.
func schemaReasons(t *testing.T, root string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "schema", "migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	var last string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if m := reasonCheck.FindAllStringSubmatch(string(b), -1); len(m) > 0 {
			last = m[len(m)-1][1]
		}
	}
	var out []string
	for _, q := range strings.Split(last, ",") {
		if q = strings.TrimSpace(q); q != "" {
			out = append(out, strings.Trim(q, "'"))
		}
	}
	slices.Sort(out)
	return out
}

var docReason = regexp.MustCompile("^\\* `([a-z_]+)`:")

// docReasons are the reasons a page lists after "The reason is one of:",
// one "* `reason`: ..." item each.
func docReasons(text string) []string {
	_, list, ok := strings.Cut(text, "The reason is one of:\n")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(strings.TrimLeft(list, "\n"), "\n\n")
	var out []string
	for _, line := range strings.Split(list, "\n") {
		if m := docReason.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return out
}

// The engine's dead-letter reasons, the table's and docs/OPERATIONS.md's
// are the same.
func TestDeadLetterReasonsAgree(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	engine := engineReasons(t, root)
	if len(engine) < 5 {
		t.Fatalf("engine reasons %q: the check would compare too little", engine)
	}
	if schema := schemaReasons(t, root); !slices.Equal(schema, engine) {
		t.Errorf("the dead_letters reason CHECK allows %q; the engine writes %q", schema, engine)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if doc := docReasons(string(b)); !slices.Equal(doc, engine) {
		t.Errorf("docs/OPERATIONS.md lists the reasons %q; the engine writes %q", doc, engine)
	}
	// The list is read as it is written: a made-up page with one reason
	// left out reads short.
	page := "the reason. The reason is one of:\n\n* `max_deliver`: x;\n* `permanent`: y\n  z;\n\nRecording * `unusable`: is idempotent"
	if got := docReasons(page); !slices.Equal(got, []string{"max_deliver", "permanent"}) {
		t.Errorf("made-up page read as %q, want [max_deliver permanent]", got)
	}
}
