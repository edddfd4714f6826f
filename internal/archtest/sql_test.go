package archtest

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ownTables matches the names of hookbridge's own tables. The word
// boundary keeps names that merely start like one (a span attribute such
// as hookbridge.outbox_event_id) out.
var ownTables = regexp.MustCompile(`\bhookbridge\.(inbox|outbox|outbox_rows|outbox_packs|conflicts|dead_letters|delivery_failures|delivery_attempts|delivery_dead_letters|delivery_endpoints|delivery_instances|delivery_pending)\b`)

// sqlHome is the one package that may hold SQL on those tables; schema
// creates them in its migrations (.sql files, not Go).
const sqlHome = "internal/store"

// allowedTableNames are lines outside the store that name a table without
// being SQL on it: file (slash-separated, from the module root) and a
// substring of the line. Each must still match something (see
// TestSQLOnOwnTablesLivesInTheStore), so a stale entry is noticed.
var allowedTableNames = []struct{ file, line, why string }{
	{"internal/metrics/collectors.go", "Unresolved rows in hookbridge.dead_letters",
		"the dead-letter gauge's help text tells operators which table it counts"},
}

// tableNameLines returns "file:line: text" for every line of src on which
// a token that is not a comment names one of the tables.
func tableNameLines(name string, src []byte) []string {
	fset := token.NewFileSet()
	file := fset.AddFile(name, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, 0) // comments are skipped
	lines := strings.Split(string(src), "\n")
	seen := map[int]bool{}
	var out []string
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.STRING || !ownTables.MatchString(lit) {
			continue
		}
		// A raw string spans lines: report each line of it that names a table.
		start := fset.Position(pos).Line
		for i, l := range strings.Split(lit, "\n") {
			n := start + i
			if ownTables.MatchString(l) && !seen[n] {
				seen[n] = true
				out = append(out, name+":"+itoa(n)+": "+strings.TrimSpace(lines[n-1]))
			}
		}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// moduleRoot is two directories up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	return root
}

// No non-comment line of a non-test Go file outside the store names one of
// hookbridge's tables: SQL on them lives in internal/store/sql/.
func TestSQLOnOwnTablesLivesInTheStore(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	var offending []string
	used := make([]bool, len(allowedTableNames))
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			if rel == sqlHome || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
	lines:
		for _, l := range tableNameLines(rel, src) {
			for i, a := range allowedTableNames {
				if strings.HasPrefix(l, a.file+":") && strings.Contains(l, a.line) {
					used[i] = true
					continue lines
				}
			}
			offending = append(offending, l)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("only %d Go files found under %s; the check would look at nothing", files, root)
	}
	slices.Sort(offending)
	for _, l := range offending {
		t.Errorf("SQL on a hookbridge table outside %s: %s", sqlHome, l)
	}
	if len(offending) > 0 {
		t.Logf("%d offending lines; move the statement to %s/sql/ and call the store", len(offending), sqlHome)
	}
	for i, ok := range used {
		if !ok {
			t.Errorf("allow-list entry %s %q matches nothing; remove it", allowedTableNames[i].file, allowedTableNames[i].line)
		}
	}
}

// The scan finds table names in strings on any line of a raw string and
// nowhere else (made-up source, so a check that can never fire does not
// pass unnoticed).
func TestTableNameLinesCatchesSQL(t *testing.T) {
	t.Parallel()
	src := []byte("package x\n" +
		"// SELECT 1 FROM hookbridge.inbox\n" +
		"/* hookbridge.outbox */\n" +
		"const q = `\n" +
		"\tSELECT count(*)\n" +
		"\tFROM hookbridge.outbox`\n" +
		"var a = \"hookbridge.outbox_event_id\"\n" +
		"var b = \"DELETE FROM hookbridge.delivery_failures\" // hookbridge.conflicts\n")
	got := tableNameLines("x.go", src)
	want := []string{"x.go:6: FROM hookbridge.outbox`", `x.go:8: var b = "DELETE FROM hookbridge.delivery_failures" // hookbridge.conflicts`}
	if !slices.Equal(got, want) {
		t.Fatalf("tableNameLines = %q, want %q", got, want)
	}
}
