package store

import (
	"strings"
	"testing"
)

// Every embedded statement file is loaded by a variable (init refuses
// otherwise), and loading drops the comment lines only.
func TestStatementsLoaded(t *testing.T) {
	if err := unusedFiles(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sqlOutboxClaim, "--") || !strings.HasPrefix(sqlOutboxClaim, "SELECT id, event_id") {
		t.Fatalf("outbox claim loaded as %q", sqlOutboxClaim)
	}
}
