package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The event id and type are a few values in a body that is often kilobytes
// of nested objects. Decoding the whole body into maps to read them cost
// about a hundred allocations per request; instead the body is checked
// once with json.Valid (no allocations) and each pointer is then followed
// through the raw bytes, skipping everything off its path.

// checkJSON reports whether doc is one JSON value (white space around it
// allowed), with the same answers the decoder gave: not JSON at all, or a
// value followed by more data.
func checkJSON(doc []byte) error {
	if json.Valid(doc) {
		return nil
	}
	// Rare, and only to word the refusal: decode the first value alone.
	var first json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(doc)).Decode(&first); err != nil {
		return fmt.Errorf("%w: body is not valid JSON", errBadRequest)
	}
	return fmt.Errorf("%w: body has trailing data after JSON", errBadRequest)
}

// readDocument returns the JSON document of a verified body
// (jsonDocument), checked by checkJSON.
func readDocument(media string, body []byte) ([]byte, error) {
	doc, err := jsonDocument(media, body)
	if err != nil {
		return nil, err
	}
	if err := checkJSON(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// jsonLookup resolves an RFC 6901 pointer in doc, which checkJSON
// accepted, to a string (unescaped, as encoding/json would give it) or a
// number (its literal text). Any other value, or no value, is not found.
// As when decoding into a map, the last of repeated keys wins.
func jsonLookup(doc []byte, ptr string) (string, bool) {
	if ptr == "" || ptr[0] != '/' || doc == nil {
		return "", false
	}
	i := skipSpace(doc, 0)
	rest := ptr[1:]
	for more := true; more; {
		var tok string
		tok, rest, more = strings.Cut(rest, "/")
		if strings.Contains(tok, "~") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		var ok bool
		switch doc[i] {
		case '{':
			i, ok = memberValue(doc, i, tok)
		case '[':
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 {
				return "", false
			}
			i, ok = elementValue(doc, i, n)
		default:
			return "", false
		}
		if !ok {
			return "", false
		}
	}
	return scalar(doc, i)
}

func skipSpace(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// memberValue returns where the value of member key starts in the object
// at doc[i] (the last one, if the key repeats).
func memberValue(doc []byte, i int, key string) (int, bool) {
	found, at := false, 0
	i = skipSpace(doc, i+1)
	if doc[i] == '}' {
		return 0, false
	}
	for {
		end := skipString(doc, i)
		match := keyEquals(doc[i:end], key)
		i = skipSpace(doc, end)
		i = skipSpace(doc, i+1) // the ':'
		if match {
			found, at = true, i
		}
		i = skipSpace(doc, skipValue(doc, i))
		if doc[i] == '}' {
			return at, found
		}
		i = skipSpace(doc, i+1) // the ','
	}
}

// elementValue returns where element n of the array at doc[i] starts.
func elementValue(doc []byte, i, n int) (int, bool) {
	i = skipSpace(doc, i+1)
	if doc[i] == ']' {
		return 0, false
	}
	for k := 0; ; k++ {
		if k == n {
			return i, true
		}
		i = skipSpace(doc, skipValue(doc, i))
		if doc[i] == ']' {
			return 0, false
		}
		i = skipSpace(doc, i+1)
	}
}

// keyEquals compares a quoted JSON string with key.
func keyEquals(quoted []byte, key string) bool {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw) == key
	}
	var s string
	return json.Unmarshal(quoted, &s) == nil && s == key
}

// skipString returns the index after the string starting at doc[i]. It
// jumps from quote to quote (bytes.IndexByte is vectorised): strings are
// most of a webhook body. A quote ends the string unless an odd number of
// backslashes precede it.
func skipString(doc []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(doc[j:], '"')
		if k < 0 {
			return len(doc)
		}
		j += k
		n := 0
		for p := j - 1; p > i && doc[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipValue returns the index after the value starting at doc[i].
func skipValue(doc []byte, i int) int {
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(doc); j++ {
			switch doc[j] {
			case '"':
				j = skipString(doc, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(doc)
	default: // number, true, false, null
		j := i
		for j < len(doc) && !isDelim(doc[j]) {
			j++
		}
		return j
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// scalar reads the string or number at doc[i].
func scalar(doc []byte, i int) (string, bool) {
	switch c := doc[i]; {
	case c == '"':
		end := skipString(doc, i)
		raw := doc[i+1 : end-1]
		if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
			return string(raw), true
		}
		// Escapes, or invalid UTF-8 (replaced by U+FFFD): exactly as
		// encoding/json reads it.
		var s string
		if json.Unmarshal(doc[i:end], &s) != nil {
			return "", false
		}
		return s, true
	case c == '-' || c >= '0' && c <= '9':
		return string(doc[i:skipValue(doc, i)]), true
	default:
		return "", false
	}
}
