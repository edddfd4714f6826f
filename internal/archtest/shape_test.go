// Package archtest checks the import rules between hookbridge's packages
// (docs: README.md, "Layout"). It has only tests: go list reports what
// every package of the module imports, directly or not, and each rule is
// a question about that graph.
package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/hookbridge/hookbridge"

// pkg is what go list says about one package.
type pkg struct {
	ImportPath string
	Standard   bool
	Deps       []string // every package it imports, directly or not (not its tests)
	Module     *struct{ Path string }
}

// rule is one import rule: no package that from selects may depend on a
// package that banned selects.
type rule struct {
	name   string
	from   func(path string) bool
	banned func(dep pkg) bool
}

func under(prefix string) func(string) bool {
	return func(path string) bool {
		return path == module+"/"+prefix || strings.HasPrefix(path, module+"/"+prefix+"/")
	}
}

func inModule(prefixes ...string) func(pkg) bool {
	return func(dep pkg) bool {
		for _, p := range prefixes {
			if under(p)(dep.ImportPath) {
				return true
			}
		}
		return false
	}
}

// rules are the import rules of the layout.
var rules = []rule{
	{
		// internal/* is the machinery below the packages a team calls:
		// reaching back up would make a cycle of intent. The handler API
		// (consumer, publisher) is the exception: the engine runs those
		// handlers, so it imports their types.
		name:   "nothing under internal/ imports app, bridge or cli",
		from:   under("internal"),
		banned: inModule("app", "bridge", "cli"),
	},
	{
		// The ingress keeps accepting while Postgres is down.
		name: "bridge never imports a Postgres package",
		from: under("bridge"),
		banned: func(dep pkg) bool {
			return strings.HasPrefix(dep.ImportPath, "github.com/jackc/") || strings.HasPrefix(dep.ImportPath, "github.com/lib/pq")
		},
	},
	{
		name:   "bridge/verify uses the standard library only",
		from:   under("bridge/verify"),
		banned: func(dep pkg) bool { return !dep.Standard },
	},
	{
		// The store is the bottom layer for SQL on hookbridge's tables:
		// every role package may call it, so it calls none of the module.
		name:   "internal/store imports no package of the module",
		from:   under("internal/store"),
		banned: func(dep pkg) bool { return strings.HasPrefix(dep.ImportPath, module+"/") },
	},
	{
		// The operator actions are shared by the admin API and the
		// command line, below both.
		name:   "ops imports neither app, cli, admin nor bridge",
		from:   under("internal/ops"),
		banned: inModule("app", "cli", "internal/admin", "bridge"),
	},
	{
		// app mounts the admin API; the API gets what it needs from it.
		name:   "admin imports neither app nor cli",
		from:   under("internal/admin"),
		banned: inModule("app", "cli"),
	},
	{
		name:   "app does not import examples",
		from:   under("app"),
		banned: inModule("examples"),
	},
	{
		name:   "consumer and publisher do not import bridge",
		from:   func(p string) bool { return under("consumer")(p) || under("publisher")(p) },
		banned: inModule("bridge"),
	},
	{
		// The handler API is what a team's code compiles against; the
		// engine and the relay build on it, never the reverse.
		name:   "consumer and publisher import neither the engine nor the relay",
		from:   func(p string) bool { return p == module+"/consumer" || p == module+"/publisher" },
		banned: inModule("internal/engine", "internal/relay"),
	},
	{
		// The test kit is public for teams' tests and used by hookbridge's
		// own; a product package importing it would link test support (and
		// package testing) into the binary.
		name:   "no product package imports the test kit",
		from:   func(p string) bool { return !under("hookbridgetest")(p) },
		banned: inModule("hookbridgetest"),
	},
	{
		// hookbridge's own internal tests of app, bridge and cli use the
		// kit; were it to import them, those tests would be import cycles.
		// It builds on consumer, publisher and the packages below them.
		name: "the test kit does not import app, bridge (but bridge/verify), cli, cmd or examples",
		from: under("hookbridgetest"),
		banned: func(dep pkg) bool {
			// bridge/verify is the signer every signed request is built with.
			return inModule("app", "bridge", "cli", "cmd", "examples")(dep) && !under("bridge/verify")(dep.ImportPath)
		},
	},
	{
		name: "the product binary does not import the load tool",
		from: func(p string) bool {
			return p == module+"/cmd/hookbridge" || under("cmd/hookbridge/builtin")(p) || under("cli")(p) || under("app")(p)
		},
		banned: inModule("cmd/hookbridge-bench"),
	},
}

// violations lists, per rule, each package that breaks it and the
// dependency that does.
func violations(pkgs map[string]pkg, rules []rule) []string {
	var out []string
	for _, r := range rules {
		for _, p := range pkgs {
			if p.Standard || !strings.HasPrefix(p.ImportPath, module) || !r.from(p.ImportPath) {
				continue
			}
			for _, d := range p.Deps {
				dep, ok := pkgs[d]
				if !ok {
					dep = pkg{ImportPath: d}
				}
				if r.banned(dep) {
					out = append(out, fmt.Sprintf("%s: %s imports %s", r.name, p.ImportPath, d))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// listModule runs go list -deps over every package of the module.
func listModule(t *testing.T) map[string]pkg {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "list", "-deps", "-json=ImportPath,Standard,Deps,Module", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	pkgs := listModule(t)
	// The rules must look at something: the packages they name exist.
	for _, p := range []string{"app", "bridge", "bridge/verify", "cli", "consumer", "publisher", "internal/store", "internal/stream", "cmd/hookbridge", "cmd/hookbridge-bench", "hookbridgetest", "internal/ops", "internal/admin", "internal/engine", "internal/relay"} {
		if _, ok := pkgs[module+"/"+p]; !ok {
			t.Fatalf("go list does not report %s/%s; the rules would check nothing", module, p)
		}
	}
	for _, v := range violations(pkgs, rules) {
		t.Error(v)
	}
}

// Each rule catches the import it forbids (checked on a made-up graph, so
// that a rule that can never fire does not pass unnoticed).
func TestImportRulesCatchViolations(t *testing.T) {
	t.Parallel()
	m := func(p string) string { return module + "/" + p }
	pkgs := map[string]pkg{}
	add := func(path string, std bool, deps ...string) {
		pkgs[path] = pkg{ImportPath: path, Standard: std, Deps: deps}
	}
	add(m("internal/stream"), false, m("app"))
	add(m("bridge"), false, "github.com/jackc/pgx/v5")
	add(m("bridge/verify"), false, "net/http", "github.com/some/lib")
	add(m("app"), false, m("examples/orders"))
	add(m("internal/store"), false, "github.com/jackc/pgx/v5", m("internal/stream"))
	add(m("consumer"), false, m("bridge"))
	add(m("publisher"), false, m("internal/relay"))
	add(m("cmd/hookbridge"), false, m("cmd/hookbridge-bench/loadgen"))
	add(m("cli"), false, m("hookbridgetest"))
	add(m("hookbridgetest"), false, m("app"))
	add(m("internal/ops"), false, m("internal/admin"))
	add(m("internal/admin"), false, m("cli"))
	add("net/http", true)
	got := violations(pkgs, rules)
	// A made-up import may break more than one rule (an internal package
	// importing cli breaks two); what matters is that each rule fires.
	for _, r := range rules {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, r.name+": ") }) {
			t.Errorf("rule %q caught nothing in:\n%s", r.name, strings.Join(got, "\n"))
		}
	}
}
