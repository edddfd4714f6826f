package bridge

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPublishHealthHold: a refusal no probe can see end (insufficient
// resources) keeps PublishHealth red for HealthHold after the last
// refused publish, then lets traffic come back to find out; a stored
// publish clears it at once.
func TestPublishHealthHold(t *testing.T) {
	h, err := New(nil, Options{HealthHold: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("nats: API error: code=503 err_code=10023 description=insufficient resources")
	h.noteRefused("HOOKS", "insufficient resources", 100, refused)
	if err := h.PublishHealth(); err == nil || !strings.Contains(err.Error(), "insufficient resources") {
		t.Fatalf("PublishHealth = %v, want the refusal", err)
	}
	time.Sleep(250 * time.Millisecond)
	if err := h.PublishHealth(); err != nil {
		t.Fatalf("PublishHealth after the hold = %v, want nil", err)
	}
	h.noteRefused("HOOKS", "insufficient resources", 100, refused)
	h.noteStored("HOOKS_CONFLICTS")
	if h.PublishHealth() == nil {
		t.Fatal("a publish stored in another stream cleared the refusal")
	}
	h.noteStored("HOOKS")
	if err := h.PublishHealth(); err != nil {
		t.Fatalf("PublishHealth after a stored publish = %v", err)
	}
}
