package hookbridgetest

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFiles writes files (path relative to a new temporary directory →
// content) and returns the directory: a configuration file with the
// migrations it names, say. Parent directories are created.
func WriteFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
