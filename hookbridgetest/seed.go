package hookbridgetest

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Seed is HOOKBRIDGE_TEST_SEED when set (to repeat a failing run of a
// randomised test), else the clock; tests log it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv("HOOKBRIDGE_TEST_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HOOKBRIDGE_TEST_SEED: %v", err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}
