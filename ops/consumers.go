package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// PauseResult is a consumer's pause state after a pause or resume.
type PauseResult struct {
	Name   string     `json:"name"`
	Paused bool       `json:"paused"`
	Until  *time.Time `json:"until,omitempty"`
}

// indefinitely is how far ahead a pause without an end is set: JetStream
// pauses always have one.
const indefinitely = 100 * 365 * 24 * time.Hour

// Pause pauses the consumer's durable on HOOKS until until (zero: until
// resumed). Messages stay in the stream and are delivered after the
// pause; pausing a paused consumer moves its end. It needs nats-server
// 2.11 or later ([ErrUnsupported] otherwise).
func (o *Ops) Pause(ctx context.Context, name string, until time.Time) (PauseResult, error) {
	if err := o.pauseUsable(ctx, name); err != nil {
		return PauseResult{}, err
	}
	if until.IsZero() {
		until = time.Now().Add(indefinitely)
	} else if !until.After(time.Now()) {
		return PauseResult{}, fmt.Errorf("pause %s: until %s is not in the future: %w", name, until.Format(time.RFC3339), ErrInvalid)
	}
	resp, err := o.JS.PauseConsumer(ctx, stream.Hooks, name, until)
	if err != nil {
		return PauseResult{}, o.pauseError("pause", name, err)
	}
	// A keyed consumer's partitions pause with it.
	for _, d := range o.partitionDurables(ctx, name) {
		if _, err := o.JS.PauseConsumer(ctx, stream.Hooks, d, until); err != nil {
			return PauseResult{}, o.pauseError("pause", d, err)
		}
	}
	out := PauseResult{Name: name, Paused: resp.Paused}
	if resp.Paused {
		u := resp.PauseUntil.UTC()
		out.Until = &u
	}
	return out, nil
}

// Resume ends the consumer's pause; resuming a running consumer changes
// nothing.
func (o *Ops) Resume(ctx context.Context, name string) (PauseResult, error) {
	if err := o.pauseUsable(ctx, name); err != nil {
		return PauseResult{}, err
	}
	resp, err := o.JS.ResumeConsumer(ctx, stream.Hooks, name)
	if err != nil {
		return PauseResult{}, o.pauseError("resume", name, err)
	}
	for _, d := range o.partitionDurables(ctx, name) {
		if _, err := o.JS.ResumeConsumer(ctx, stream.Hooks, d); err != nil {
			return PauseResult{}, o.pauseError("resume", d, err)
		}
	}
	return PauseResult{Name: name, Paused: resp.Paused}, nil
}

// partitionDurables are the partition durables of consumer name on HOOKS
// (none for a consumer without a keyed source).
func (o *Ops) partitionDurables(ctx context.Context, name string) []string {
	s, err := o.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		return nil
	}
	var out []string
	names := s.ConsumerNames(ctx)
	for n := range names.Name() {
		if owner, p := stream.ConsumerOfDurable(n); owner == name && p >= 0 {
			out = append(out, n)
		}
	}
	return out
}

// pauseUsable checks the consumer is configured and the server can pause
// consumers: older servers do not answer the pause request at all, so
// their version is checked first rather than waiting for a timeout.
func (o *Ops) pauseUsable(ctx context.Context, name string) error {
	if _, err := o.Consumer(name); err != nil {
		return err
	}
	if o.JS == nil {
		return errNoJetStream
	}
	if v := o.JS.Conn().ConnectedServerVersion(); v != "" && !atLeast(v, 2, 11) {
		return fmt.Errorf("consumer pause needs nats-server 2.11 or later; this server is %s: %w", v, ErrUnsupported)
	}
	if _, err := o.JS.Consumer(ctx, stream.Hooks, name); errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %s has no durable on %s yet (has serve started it?): %w", name, stream.Hooks, ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("consumer %s: %w", name, err)
	}
	return nil
}

func (o *Ops) pauseError(what, name string, err error) error {
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%s %s: %w", what, name, ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", what, name, err)
}

// atLeast reports whether the server version v ("2.11.3", "v2.9.10") is at
// least major.minor.
func atLeast(v string, major, minor int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}
