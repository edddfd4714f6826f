// Package errtext makes error texts safe to store in a table or a log
// line: the consumer's dead letters and failure counters and the relay's
// last_error all go through [Short], so they follow one rule.
package errtext

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxLen bounds stored and logged error texts: enough to diagnose, too
// short to carry a payload.
const MaxLen = 500

// credentialsInURL matches the user-info part of a URL.
var credentialsInURL = regexp.MustCompile(`://[^/@\s]*@`)

// Short returns s on one line (runs of whitespace and control characters
// become one space), with credentials in URLs replaced by ***, cut to at
// most [MaxLen] bytes on a rune boundary and marked with … when cut.
func Short(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	s = credentialsInURL.ReplaceAllString(s, "://***@")
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxLen {
		return s
	}
	cut := MaxLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
