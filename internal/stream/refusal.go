package stream

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Reasons [StorageRefusal] gives.
const (
	// RefusalStreamFull: the stream is at its max_bytes or max_msgs limit
	// (discard: new refuses instead of deleting unapplied messages).
	RefusalStreamFull = "stream full"
	// RefusalInsufficientResources: the server's store has no room.
	RefusalInsufficientResources = "insufficient resources"
)

// StorageRefusal names why JetStream refused to store a message for lack
// of room ([RefusalStreamFull], [RefusalInsufficientResources]), or
// returns "" for any other error. Such a refusal is the broker's
// condition, not the message's: the ingress answers 503 and reports it in
// readiness, the relay retries without counting it as a failed attempt.
func StorageRefusal(err error) string {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return ""
	}
	desc := strings.ToLower(api.Description)
	switch {
	case strings.Contains(desc, "maximum bytes exceeded"),
		strings.Contains(desc, "maximum messages exceeded"),
		strings.Contains(desc, "maximum messages per subject exceeded"):
		return RefusalStreamFull
	case api.ErrorCode == 10023, // insufficient resources
		api.ErrorCode == 10047, // insufficient storage resources available
		api.ErrorCode == 10028, // insufficient memory resources available
		strings.Contains(desc, "insufficient"),
		strings.Contains(desc, "no space left"):
		return RefusalInsufficientResources
	}
	return ""
}

// AtLimit says why the stream of info refuses its next message of a
// typical size, nil while it has room. (A full server store shows only
// in refused publishes: [StorageRefusal].) Status shows it, and the
// storage guard reports it in readiness.
func AtLimit(info *jetstream.StreamInfo) error {
	st, cfg := info.State, info.Config
	if cfg.MaxMsgs > 0 && int64(st.Msgs) >= cfg.MaxMsgs {
		return fmt.Errorf("stream %s full: %d of %d messages", cfg.Name, st.Msgs, cfg.MaxMsgs)
	}
	if cfg.MaxBytes > 0 {
		room := int64(1)
		if st.Msgs > 0 {
			room = int64(st.Bytes / st.Msgs)
		}
		if cfg.MaxBytes-int64(st.Bytes) < room {
			return fmt.Errorf("stream %s full: %d of %d bytes", cfg.Name, st.Bytes, cfg.MaxBytes)
		}
	}
	return nil
}
