package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// lowerMargin is the room a stream must have under a lowered byte limit:
// the limit is lowered only when the stream holds at most this share of
// the new one, so that publishes landing between the look and the update
// cannot push it over.
const lowerMargin = 0.9

// SafeMaxBytes is the byte limit (-1: none) to give a stream in the state
// cur when want is wanted. Raising a limit, or lowering it well above
// what the stream holds, gives want. Lowering it below that keeps the
// stream's current limit: nats-server 2.9 deletes the oldest messages to
// fit a lowered limit, discard policy new or not, and those may be
// unapplied webhooks. The storage guard lowers it later, once it has
// trimmed what every consumer applied. cur nil (no stream yet) gives want.
func SafeMaxBytes(cur *jetstream.StreamInfo, want int64) int64 {
	if want <= 0 {
		want = -1
	}
	if cur == nil {
		return want
	}
	have := cur.Config.MaxBytes
	if have <= 0 {
		have = -1
	}
	lowering := want > 0 && (have < 0 || want < have)
	if !lowering || float64(cur.State.Bytes) <= lowerMargin*float64(want) {
		return want
	}
	return have
}

// MinDefaultHooksMaxBytes is the smallest default byte bound
// [EnsureHooks] and [EnsureEvents] fall back to on a server with little
// storage.
const MinDefaultHooksMaxBytes int64 = 64 << 20

// errCodeStorageExceeded is nats-server's JSStorageResourcesExceededErr:
// a stream's byte limit is reserved in the server's store, and a limit
// larger than what is left is refused.
const errCodeStorageExceeded jetstream.ErrorCode = 10047

// EnsureHooks creates [Hooks] with [HooksConfig](o), or updates it to
// that (see [EnsureKeepingMessages]), and returns the byte bound it set
// (-1: none). A default bound the server has not the storage for (its
// size was not known: an external server without account limits) is
// halved until the server takes it, down to [MinDefaultHooksMaxBytes];
// below that HOOKS has no bound of its own, and the server's store
// refuses new messages when it is full.
func EnsureHooks(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.Stream, int64, error) {
	return ensureBounded(ctx, HooksConfig(o), js, o.MaxBytes == 0)
}

// EnsureEvents creates [Events] with [EventsConfig](o), or updates it to
// that (see [EnsureKeepingMessages]), and returns the byte bound it set
// (-1: none). A default bound the server has not the storage for is
// halved as [EnsureHooks] halves HOOKS's.
func EnsureEvents(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.Stream, int64, error) {
	return ensureBounded(ctx, EventsConfig(o), js, o.MaxBytes == 0 && o.Delivery)
}

// ensureBounded ensures cfg, halving its byte bound while the server
// refuses it for storage when shrink (the bound is the default).
func ensureBounded(ctx context.Context, cfg jetstream.StreamConfig, js jetstream.JetStream, shrink bool) (jetstream.Stream, int64, error) {
	for {
		s, err := EnsureKeepingMessages(ctx, js, cfg)
		if err == nil || !shrink || !storageExceeded(err) || cfg.MaxBytes < 0 {
			return s, cfg.MaxBytes, err
		}
		if cfg.MaxBytes /= 2; cfg.MaxBytes < MinDefaultHooksMaxBytes {
			cfg.MaxBytes = -1
		}
	}
}

func storageExceeded(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStorageExceeded
}

// EnsureKeepingMessages creates the stream cfg names, or updates it to
// cfg except for a byte limit that [SafeMaxBytes] keeps: an existing
// deployment upgrades in place without losing a stored message.
func EnsureKeepingMessages(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	default:
		cfg.MaxBytes = SafeMaxBytes(s.CachedInfo(), cfg.MaxBytes)
	}
	return Ensure(ctx, js, cfg)
}
