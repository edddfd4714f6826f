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
	const hold = 200 * time.Millisecond
	h, err := New(nil, Options{HealthHold: hold})
	if err != nil {
		t.Fatal(err)
	}
	// A check made after the hold has passed (a stalled machine) proves
	// nothing about the hold and is skipped.
	within := func(since time.Time) bool { return time.Since(since) < hold }
	refused := errors.New("nats: API error: code=503 err_code=10023 description=insufficient resources")
	at := time.Now()
	h.noteRefused("HOOKS", "insufficient resources", 100, refused)
	if err := h.PublishHealth(); within(at) && (err == nil || !strings.Contains(err.Error(), "insufficient resources")) {
		t.Fatalf("PublishHealth = %v, want the refusal", err)
	}
	time.Sleep(time.Until(at.Add(hold + 50*time.Millisecond)))
	if err := h.PublishHealth(); err != nil {
		t.Fatalf("PublishHealth after the hold = %v, want nil", err)
	}
	at = time.Now()
	h.noteRefused("HOOKS", "insufficient resources", 100, refused)
	h.noteStored("HOOKS_CONFLICTS")
	if err := h.PublishHealth(); within(at) && err == nil {
		t.Fatal("a publish stored in another stream cleared the refusal")
	}
	h.noteStored("HOOKS")
	if err := h.PublishHealth(); err != nil {
		t.Fatalf("PublishHealth after a stored publish = %v", err)
	}
}
