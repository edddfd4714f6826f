// Package console holds the operator web console: a static page, its
// script and its stylesheet, embedded in the binary so that building
// hookbridge needs no Node tool chain. The admin listener serves them at /
// without authentication (they hold no data); the page asks for the admin
// token and sends it with each API request.
package console

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// FS holds the console's files with index.html at its top, ready for
// http.FileServerFS.
var FS fs.FS = sub()

func sub() fs.FS {
	s, err := fs.Sub(files, "static")
	if err != nil {
		// fs.Sub fails only for an invalid path name; "static" is valid.
		panic("console: " + err.Error())
	}
	return s
}
