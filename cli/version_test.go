package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// version names the commit stamped at build time (-ldflags -X), else
// says it is unknown instead of printing nothing about it. Not parallel:
// it sets the stamped variables.
func TestVersionNamesTheStampedCommit(t *testing.T) {
	out, err := runOps(t, "version")
	if err != nil || !strings.Contains(out, " commit ") {
		t.Fatalf("version without a stamp: %v %q, want the commit or that it is unknown", err, out)
	}
	stampedVersion, stampedCommit = "v1.2.3", "0123456789abcdef"
	t.Cleanup(func() { stampedVersion, stampedCommit = "", "" })
	out, err = runOps(t, "version")
	if err != nil || !strings.HasPrefix(out, "hookbridge v1.2.3 commit 0123456789abcdef ") {
		t.Fatalf("version with a stamp: %v %q", err, out)
	}
}

// The Dockerfile stamps the variables version reads: a -X naming one that
// does not exist is silently ignored by the linker.
func TestDockerfileStampsTheVersionVariables(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stamps := regexp.MustCompile(`-X github\.com/hookbridge/hookbridge/cli\.(\w+)=`).FindAllStringSubmatch(string(b), -1)
	if len(stamps) != 2 {
		t.Fatalf("the Dockerfile stamps %d cli variables, want the version and the commit", len(stamps))
	}
	f, err := parser.ParseFile(token.NewFileSet(), "version.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					declared[n.Name] = true
				}
			}
		}
	}
	for _, m := range stamps {
		if !declared[m[1]] {
			t.Errorf("the Dockerfile stamps cli.%s, which cli/version.go does not declare", m[1])
		}
	}
}
