package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// refLookupPointer is the former implementation: decode the whole body
// into maps, then walk them. It is the reference jsonLookup must agree with.
func refLookupPointer(doc any, ptr string) (string, bool) {
	if ptr == "" || doc == nil {
		return "", false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[tok]
			if !ok {
				return "", false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(node) {
				return "", false
			}
			cur = node[i]
		default:
			return "", false
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	default:
		return "", false
	}
}

// refParseBody is the former decoding of a verified body.
func refParseBody(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: body is not valid JSON", errBadRequest)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: body has trailing data after JSON", errBadRequest)
	}
	return doc, nil
}

// jsonSamples are bodies with the shapes providers send and the corners
// of JSON: escapes, repeated keys, numbers in every notation, arrays,
// nesting, invalid UTF-8, white space, and invalid or trailing data.
var jsonSamples = []string{
	`{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1","amount":100}}}`,
	`{"type":"a","type":"b"}`,
	`{"id":12345,"n":-0.5e+10,"z":0,"e":1E3}`,
	`{"a\u002Fb":"x\n\"y","k\"":"v","~":"tilde","a/b":"slash"}`,
	`{"event":{"type":"app_mention","items":[{"id":"i0"},{"id":"i1"}]},"event_id":"Ev1"}`,
	`[{"id":"first"},2,"three",[4]]`,
	"{\"bad\xffutf8\":\"v\xfe\"}",
	` 	{ "id" : "spaced" , "type" : [ 1 , { "x" : "y" } ] } 
`,
	`{"":"empty key","id":null,"t":true,"f":false,"o":{},"l":[]}`,
	`"just a string"`,
	`42`,
	`{"deep":{"a":{"b":{"c":{"d":"e"}}}}}`,
	`{"id":"x"} {"id":"y"}`,
	`{"id":"x"} }`,
	`{"id":`,
	``,
	`not json`,
	`{"id":"\ud83d\ude00 surrogate","lone":"\ud800"}`,
	`{"a":{"b":"inner"},"a":"outer"}`,
}

var jsonPointers = []string{"/id", "/type", "/type/1/x", "/data/object/id", "/data/object/amount", "/n", "/z", "/e",
	"/a~1b", "/k\"", "/~0", "/event/type", "/event/items/1/id", "/event/items/2/id", "/event/items/-1/id", "/0/id", "/1", "/2", "/3/0",
	"/bad\ufffdutf8", "/", "/t", "/o", "/l", "/deep/a/b/c/d", "/lone", "/a", "/a/b", "/event_id", "/missing", "/id/x"}

// TestJSONLookupMatchesDecoding: for every sample and pointer, checkJSON
// refuses exactly what decoding refuses (with the same words, except that
// checkJSON calls any data after the value trailing data), and jsonLookup
// finds exactly what the map walk finds.
func TestJSONLookupMatchesDecoding(t *testing.T) {
	for _, body := range jsonSamples {
		compareWithReference(t, []byte(body), jsonPointers)
	}
}

func compareWithReference(t *testing.T, body []byte, ptrs []string) {
	t.Helper()
	doc, refErr := refParseBody(body)
	err := checkJSON(body)
	switch {
	case refErr != nil && err == nil:
		t.Fatalf("%q: reference refuses (%v), checkJSON accepts", body, refErr)
	case refErr != nil && err.Error() != refErr.Error():
		t.Fatalf("%q: checkJSON says %q, reference %q", body, err, refErr)
	case refErr == nil && err != nil:
		// The decoder's More() lets a stray '}' or ']' after the value
		// pass; checkJSON refuses anything after the value.
		if !errors.Is(err, errBadRequest) || !strings.Contains(err.Error(), "trailing data") {
			t.Fatalf("%q: reference accepts, checkJSON says %v", body, err)
		}
		return
	case err != nil:
		return
	}
	for _, p := range ptrs {
		want, wantOK := refLookupPointer(doc, p)
		got, gotOK := jsonLookup(body, p)
		if got != want || gotOK != wantOK {
			t.Fatalf("%q at %q: jsonLookup = %q, %v; reference %q, %v", body, p, got, gotOK, want, wantOK)
		}
	}
}

// FuzzJSONLookup compares jsonLookup and checkJSON with the former
// decode-everything implementation on arbitrary bodies and pointers.
func FuzzJSONLookup(f *testing.F) {
	for _, b := range jsonSamples {
		f.Add([]byte(b), "/id")
	}
	f.Add([]byte(`{"a":[{"b":"c"}]}`), "/a/0/b")
	f.Fuzz(func(t *testing.T, body []byte, ptr string) {
		if !strings.HasPrefix(ptr, "/") {
			ptr = "/" + ptr
		}
		compareWithReference(t, body, append([]string{ptr}, jsonPointers...))
	})
}
