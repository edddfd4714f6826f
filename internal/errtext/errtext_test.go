package errtext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestShort(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"two\nlines\t and  tabs", "two lines and tabs"},
		{"dial postgres://user:secret@db:5432/x failed", "dial postgres://***@db:5432/x failed"},
		{"nats://tok@127.0.0.1:4222 down", "nats://***@127.0.0.1:4222 down"},
		{"bell\x07 and del\x7f", "bell and del"},
	}
	for _, c := range cases {
		if got := Short(c.in); got != c.want {
			t.Errorf("Short(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestShortBoundsAndKeepsUTF8(t *testing.T) {
	long := strings.Repeat("é", MaxLen) // 2 bytes each
	got := Short(long)
	if len(got) > MaxLen+len("…") || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("Short(long) = %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := Short("bad \xff byte"); !utf8.ValidString(got) {
		t.Fatalf("Short kept invalid UTF-8: %q", got)
	}
}
