package stream

import (
	"strings"
	"testing"
)

// TestTypeSubject pins the documented mapping of provider event types to
// subject tokens, and that every result is a safe subject tail.
func TestTypeSubject(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"order.created":                    "order.created",
		"orders/create":                    "orders.create",
		"deploy:staging":                   "deploy%3Astaging",
		"repository_dispatch.deploy:prod":  "repository_dispatch.deploy%3Aprod",
		"order..created":                   "order.%2Ecreated",
		".order":                           "%2Eorder",
		"order.":                           "order%2E",
		".":                                "%2E",
		"..":                               "%2E%2E",
		"a...":                             "a.%2E%2E",
		"/orders":                          "%2Forders",
		"orders//create":                   "orders.%2Fcreate",
		"order.>":                          "order.%3E",
		"order.*":                          "order.%2A",
		">":                                "%3E",
		"message changed":                  "message%20changed",
		"100%":                             "100%25",
		"café":                             "caf%C3%A9",
		"a\x00b":                           "a%00b",
		"A-b_C.9":                          "A-b_C.9",
		"customer.subscription.updated":    "customer.subscription.updated",
		"pull_request.review_requested":    "pull_request.review_requested",
		"with\nnewline":                    "with%0Anewline",
		"tab\tand space ":                  "tab%09and%20space%20",
		"app_rate_limited":                 "app_rate_limited",
		"issues.opened":                    "issues.opened",
		"a.b/c":                            "a.b.c",
		"x%2Ey":                            "x%252Ey",
		strings.Repeat("a", 200):           strings.Repeat("a", 200),
		strings.Repeat("a.", 99) + "a":     strings.Repeat("a.", 99) + "a",
		"emoji.\U0001F680":                 "emoji.%F0%9F%9A%80",
		"order.created.v2":                 "order.created.v2",
		"hooks.demo.order":                 "hooks.demo.order",
		"Shopify/Topic/With/Many/Segments": "Shopify.Topic.With.Many.Segments",
	}
	for in, want := range cases {
		got := TypeSubject(in)
		if got != want {
			t.Errorf("TypeSubject(%q) = %q, want %q", in, got, want)
		}
		if !safeTail(got) {
			t.Errorf("TypeSubject(%q) = %q is not a safe subject tail", in, got)
		}
		checkReverse(t, in, got)
	}
}

// TestTypeSubjectLong shortens long types to MaxTypeSubjectBytes with a
// hash, never splitting an escape, never equal to an unshortened tail.
func TestTypeSubjectLong(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		strings.Repeat("a", 201),
		strings.Repeat("é", 100),
		strings.Repeat("ab:", 80),
		strings.Repeat("x", 173) + ":" + strings.Repeat("y", 80),
		strings.Repeat("x", 172) + ":" + strings.Repeat("y", 80),
		strings.Repeat("x", 171) + "::" + strings.Repeat("y", 80),
		strings.Repeat("a.", 120),
	} {
		got := TypeSubject(in)
		if len(got) > MaxTypeSubjectBytes || !safeTail(got) || !strings.Contains(got, "%H") {
			t.Errorf("TypeSubject(%d bytes) = %q (%d bytes): want a safe, hashed tail of at most %d bytes", len(in), got, len(got), MaxTypeSubjectBytes)
		}
		if _, ok := TypeFromSubject(got); ok {
			t.Errorf("TypeFromSubject(%q) claims to reverse a shortened type", got)
		}
		if TypeSubject(in+"z") == got {
			t.Errorf("two long types share %q", got)
		}
	}
}

// TestTypeHeader keeps plain types verbatim and percent-encodes those a
// NATS header would alter; both decode to the original.
func TestTypeHeader(t *testing.T) {
	t.Parallel()
	for in, wantEncoded := range map[string]bool{
		"orders/create":   false,
		"deploy:staging":  false,
		"message changed": false,
		"café":            false,
		"100%":            false,
		" leading":        true,
		"trailing ":       true,
		"new\nline":       true,
		"cr\rhere":        true,
		"nul\x00":         true,
		"bad\xffutf8":     true,
		"del\x7f":         true,
	} {
		v, enc := TypeHeader(in)
		if enc != wantEncoded {
			t.Errorf("TypeHeader(%q) encoded = %v, want %v", in, enc, wantEncoded)
		}
		encoding := ""
		if enc {
			encoding = TypeEncodingPercent
			if !headerSafe(v) {
				t.Errorf("TypeHeader(%q) = %q is not header-safe", in, v)
			}
		}
		if back, ok := TypeFromHeader(v, encoding); !ok || back != in {
			t.Errorf("TypeFromHeader(%q, %q) = %q, %v; want %q", v, encoding, back, ok, in)
		}
	}
}

// TestHookFilterUsesProviderSpelling: a consumer's event type in the
// provider's spelling filters the subject its deliveries are published on.
func TestHookFilterUsesProviderSpelling(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"deploy:staging", "orders/create", "order.created", "a..b"} {
		if f, s := HookFilter("src", typ), HookSubject("src", typ); f != s {
			t.Errorf("HookFilter(%q) = %q, HookSubject = %q", typ, f, s)
		}
	}
	if got := HookFilter("", "orders/create"); got != "hooks.*.orders.create" {
		t.Errorf("HookFilter = %q", got)
	}
	for s, want := range map[string]bool{"x": true, strings.Repeat("x", 255): true, "": false, strings.Repeat("x", 256): false, "a\x00": true} {
		if ValidTypeSpelling(s) != want {
			t.Errorf("ValidTypeSpelling(%q) = %v", s, !want)
		}
	}
}

// checkReverse: TypeFromSubject gives back the original exactly when it
// has no '/', and in any case a type that maps to the same tail.
func checkReverse(t *testing.T, in, tail string) {
	t.Helper()
	back, ok := TypeFromSubject(tail)
	if !ok {
		t.Errorf("TypeFromSubject(%q) failed", tail)
		return
	}
	if !strings.Contains(in, "/") && back != in {
		t.Errorf("TypeFromSubject(%q) = %q, want %q", tail, back, in)
	}
	if TypeSubject(back) != tail {
		t.Errorf("TypeSubject(TypeFromSubject(%q)) = %q", tail, TypeSubject(back))
	}
}

// safeTail reports whether s is dot-separated non-empty tokens of
// [A-Za-z0-9_-%], so never a wildcard and never an empty token.
func safeTail(s string) bool {
	if s == "" {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			if !plainByte(tok[i]) && tok[i] != '%' {
				return false
			}
		}
	}
	return true
}

// FuzzTypeSubject: any type maps to a safe tail, deterministically, and
// (unless shortened) back to itself with '/' read as '.'.
func FuzzTypeSubject(f *testing.F) {
	for _, s := range []string{"order.created", "orders/create", "deploy:staging", "..", "a\x00.b", strings.Repeat("é", 120)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" {
			return
		}
		got := TypeSubject(s)
		if !safeTail(got) || len(got) > MaxTypeSubjectBytes || got != TypeSubject(s) {
			t.Fatalf("TypeSubject(%q) = %q", s, got)
		}
		if len(got) < MaxTypeSubjectBytes-26 {
			checkReverse(t, s, got)
		}
		v, enc := TypeHeader(s)
		enc2 := ""
		if enc {
			enc2 = TypeEncodingPercent
		}
		if back, ok := TypeFromHeader(v, enc2); !ok || back != s {
			t.Fatalf("header round trip of %q: %q", s, back)
		}
	})
}
