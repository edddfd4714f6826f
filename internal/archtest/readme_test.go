package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeSnippets are the README's Go snippets and the code they must be:
// a declaration shown whole (body false) or the body of an Example
// function, dedented (body true). The Example functions compile and run
// with the tests, so a snippet kept equal to them compiles too.
var readmeSnippets = []struct {
	file, decl string
	body       bool
}{
	{"consumer/example_mux_test.go", "// invoicePaid applies", false},
	{"consumer/example_mux_test.go", "func ExampleMux()", true},
	{"cli/example_main_test.go", "func ExampleMain()", true},
	{"publisher/example_enqueue_test.go", "func ExampleEnqueue()", true},
	{"examples/orders/kit_test.go", "// A handler's test with the kit", false},
}

// snippet extracts from src the declaration starting at decl (through its
// closing brace at the start of a line), or that function's body
// dedented by one tab.
func snippet(src, decl string, body bool) (string, bool) {
	i := strings.Index(src, decl)
	if i < 0 {
		return "", false
	}
	if body {
		i += strings.Index(src[i:], "\n") + 1
	}
	j := strings.Index(src[i:], "\n}\n")
	if j < 0 {
		return "", false
	}
	if !body {
		return src[i : i+j+2], true
	}
	lines := strings.Split(src[i:i+j], "\n")
	for k, l := range lines {
		lines[k] = strings.TrimPrefix(l, "\t")
	}
	return strings.Join(lines, "\n"), true
}

// The README shows exactly the code of the Example functions (and of the
// kit test it quotes): editing one without the other fails here.
func TestREADMEShowsTheExamples(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range readmeSnippets {
		src, err := os.ReadFile(filepath.Join(root, sn.file))
		if err != nil {
			t.Fatal(err)
		}
		code, ok := snippet(string(src), sn.decl, sn.body)
		if !ok {
			t.Errorf("%s: no %q", sn.file, sn.decl)
			continue
		}
		if !strings.Contains(string(readme), "```go\n"+code+"\n```") {
			t.Errorf("README.md does not show %s's %q exactly; paste:\n%s", sn.file, sn.decl, code)
		}
	}
}

// The check catches a README that drifted from its example.
func TestREADMESnippetCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	src := "package x\n\nfunc ExampleX() {\n\tfmt.Println(1)\n\t// Output: 1\n}\n"
	code, ok := snippet(src, "func ExampleX()", true)
	if !ok || code != "fmt.Println(1)\n// Output: 1" {
		t.Fatalf("snippet = %q, %t", code, ok)
	}
	if strings.Contains("```go\nfmt.Println(2)\n// Output: 1\n```", "```go\n"+code+"\n```") {
		t.Fatal("a changed snippet matched")
	}
}
