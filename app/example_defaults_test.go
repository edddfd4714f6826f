package app

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The defaults examples/hookbridge.yaml states in its comments
// ("(default: 720h …)", "(default 256, …)") are the ones serve uses: each
// is compared with the key's value in the resolved configuration that
// `config check` prints for a file that leaves the key out.
func TestExampleConfigStatesTheRealDefaults(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile("../examples/hookbridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("", mapEnv(nil), Overrides{}, ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := cfg.Resolved(ordersHandlers())
	if err != nil {
		t.Fatal(err)
	}
	printed, err := EffectiveYAML(resolved)
	if err != nil {
		t.Fatal(err)
	}
	stated := regexp.MustCompile(`^[#\s-]*([a-z_]+):.*#.*\(default:? ([^,;:)\s]+)`)
	checked := 0
	for _, line := range strings.Split(string(example), "\n") {
		m := stated.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key, want := m[1], m[2]
		got, ok := printedValue(string(printed), key)
		if !ok {
			continue // not a scalar (event_types: all the handler knows)
		}
		checked++
		if !sameValue(want, got) {
			t.Errorf("examples/hookbridge.yaml says %s defaults to %q; serve uses %q:\n%s", key, want, got, line)
		}
	}
	if checked < 2 {
		t.Fatalf("checked %d stated defaults; the comments' form changed?", checked)
	}
}

// printedValue is key's first scalar value in the printed configuration.
func printedValue(printed, key string) (string, bool) {
	m := regexp.MustCompile(`(?m)^[\s-]*` + regexp.QuoteMeta(key) + `: ([^\s#]+)`).FindStringSubmatch(printed)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// sameValue compares a stated and a printed value as durations or
// numbers when both read as one, else as text.
func sameValue(stated, printed string) bool {
	if a, err := time.ParseDuration(stated); err == nil {
		b, err := time.ParseDuration(printed)
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(stated, 64); err == nil {
		b, err := strconv.ParseFloat(printed, 64)
		return err == nil && a == b
	}
	return stated == printed
}
