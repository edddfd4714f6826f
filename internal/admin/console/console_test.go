package console_test

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/internal/admin/console"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(console.FS, name)
	if err != nil {
		t.Fatalf("console file %s: %v", name, err)
	}
	return string(b)
}

// TestFSHasThePageAtItsTop: index.html, app.js and app.css are at the top
// of FS (what the admin listener serves at /), and the page loads the two.
func TestFSHasThePageAtItsTop(t *testing.T) {
	t.Parallel()
	html := read(t, "index.html")
	read(t, "app.js")
	read(t, "app.css")
	for _, ref := range []string{`src="app.js"`, `href="app.css"`} {
		if !strings.Contains(html, ref) {
			t.Errorf("index.html does not load %s", ref)
		}
	}
	if _, err := fs.Stat(console.FS, "static"); err == nil {
		t.Error("FS is not rooted at static/: static/ is visible inside it")
	}
}

// TestScriptRendersNoHTML: the script builds every node with
// createElement and textContent; none of the sinks that parse a string
// as HTML or code appears in it, so nothing received can become markup.
func TestScriptRendersNoHTML(t *testing.T) {
	t.Parallel()
	js := read(t, "app.js")
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "createContextualFragment"} {
		if strings.Contains(js, sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
}

var (
	idAttr   = regexp.MustCompile(`\bid="([^"]+)"`)
	forAttr  = regexp.MustCompile(`\bfor="([^"]+)"`)
	control  = regexp.MustCompile(`<(input|select|textarea)\b[^>]*>`)
	jsLookup = regexp.MustCompile(`\$\("([^"]+)"\)`)
	jsID     = regexp.MustCompile(`\bid: "([^"]+)"`)
	jsFor    = regexp.MustCompile(`\bfor: "([^"]+)"`)
	jsPage   = regexp.MustCompile(`"page-" \+`)
)

// TestEveryControlIsLabelledAndEveryLookupExists: each form control of
// the page has a <label for> (screen readers name it), each label points
// at a control, and each element the script looks up by id exists in the
// page or is created by the script.
func TestEveryControlIsLabelledAndEveryLookupExists(t *testing.T) {
	t.Parallel()
	html := read(t, "index.html")
	js := read(t, "app.js")
	ids := map[string]bool{}
	for _, m := range idAttr.FindAllStringSubmatch(html, -1) {
		ids[m[1]] = true
	}
	for _, m := range jsID.FindAllStringSubmatch(js, -1) {
		ids[m[1]] = true
	}
	labelled := map[string]bool{}
	for _, m := range forAttr.FindAllStringSubmatch(html, -1) {
		labelled[m[1]] = true
		if !ids[m[1]] {
			t.Errorf("label for=%q names no element", m[1])
		}
	}
	for _, m := range jsFor.FindAllStringSubmatch(js, -1) {
		labelled[m[1]] = true
		if !ids[m[1]] {
			t.Errorf("script label for=%q names no element", m[1])
		}
	}
	for _, tag := range control.FindAllString(html, -1) {
		if strings.Contains(tag, `type="checkbox"`) {
			continue // wrapped in its <label class="inline">
		}
		m := idAttr.FindStringSubmatch(tag)
		if m == nil || !labelled[m[1]] {
			t.Errorf("control without a label: %s", tag)
		}
	}
	for _, m := range jsLookup.FindAllStringSubmatch(js, -1) {
		if !ids[m[1]] {
			t.Errorf("app.js looks up #%s, which neither the page nor the script has", m[1])
		}
	}
	if !jsPage.MatchString(js) {
		t.Fatal("app.js no longer finds pages as page-<name>; update this test")
	}
	pages := regexp.MustCompile(`const PAGES = \[([^\]]+)\]`).FindStringSubmatch(js)
	if pages == nil {
		t.Fatal("PAGES not found in app.js")
	}
	var names []string
	for _, p := range strings.Split(pages[1], ",") {
		names = append(names, strings.Trim(strings.TrimSpace(p), `"`))
	}
	for _, p := range names {
		if !ids["page-"+p] {
			t.Errorf("page %q has no section#page-%s", p, p)
		}
	}
	if !slices.Contains(names, "login") {
		t.Error("no login page")
	}
}
