package hookbridgetest

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer is where a test points a logger (slog.NewTextHandler(&buf,
// …)) to read what a server logged: the server's goroutines write while the
// test reads, so it is safe for concurrent use. The zero value is ready.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything logged so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the logged lines that contain every one of parts (all
// lines when none is given).
func (l *LogBuffer) Lines(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		match := line != ""
		for _, p := range parts {
			match = match && strings.Contains(line, p)
		}
		if match {
			out = append(out, line)
		}
	}
	return out
}
