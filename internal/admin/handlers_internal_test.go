package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestFingerprintCannotBeCheckedAgainstAGuess: the audit log's name of a
// token is keyed with a key drawn at start, so a reader of the logs who
// guesses the token cannot confirm the guess by hashing it.
func TestFingerprintCannotBeCheckedAgainstAGuess(t *testing.T) {
	t.Parallel()
	const token = "a-token-of-twenty-chars"
	sum := sha256.Sum256([]byte(token))
	plain := hex.EncodeToString(sum[:4])
	a, b := fingerprint(token), fingerprint(token)
	if a == plain || strings.HasPrefix(hex.EncodeToString(sum[:]), a) {
		t.Fatalf("fingerprint %s is the token's plain hash", a)
	}
	if a == b {
		t.Fatalf("two keys gave the same fingerprint %s", a)
	}
	if len(a) != 8 {
		t.Fatalf("fingerprint %q, want 8 hex digits", a)
	}
}
