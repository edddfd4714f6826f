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

// DeleteResult is what [Ops.DeleteDurable] removed, as it was.
type DeleteResult struct {
	Name string `json:"name"`
	// Deleted are the durables deleted: name itself, or the consumer's
	// own durable and its partition durables.
	Deleted []string `json:"deleted"`
	// AckFloorSeq is the lowest HOOKS sequence they had acked up to;
	// Pending and AckPending what they had not received or acked yet.
	AckFloorSeq uint64 `json:"ack_floor_seq"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
}

// DeleteDurable deletes the durables on HOOKS of a consumer that is not
// configured: name's own and its partition durables, or the one partition
// durable name is. Such orphans (status lists them) keep every message
// they have not acked in HOOKS for good. It refuses a configured
// consumer's durables (serve would make them again, from the stream's
// first message), a consumer that is not durable (a replay's goes by
// itself), and durables a client pulls from (a serve whose configuration
// names the consumer, say); then nothing is deleted.
func (o *Ops) DeleteDurable(ctx context.Context, name string) (DeleteResult, error) {
	if owner, _ := stream.ConsumerOfDurable(name); owner != "" {
		if _, err := o.Consumer(owner); err == nil {
			return DeleteResult{}, fmt.Errorf("%s is a durable of configured consumer %s; take the consumer out of the configuration first: %w",
				name, owner, ErrInvalid)
		}
	}
	if o.JS == nil {
		return DeleteResult{}, errNoJetStream
	}
	targets, err := o.durablesOf(ctx, name)
	if err != nil {
		return DeleteResult{}, err
	}
	out := DeleteResult{Name: name, Deleted: []string{}}
	for i, ci := range targets {
		if i == 0 || ci.AckFloor.Stream < out.AckFloorSeq {
			out.AckFloorSeq = ci.AckFloor.Stream
		}
		out.Pending += ci.NumPending
		out.AckPending += ci.NumAckPending
	}
	for _, ci := range targets {
		if err := o.JS.DeleteConsumer(ctx, stream.Hooks, ci.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return out, fmt.Errorf("delete %s: %w", ci.Name, err)
		}
		out.Deleted = append(out.Deleted, ci.Name)
	}
	return out, nil
}

// durablesOf are the durables DeleteDurable would delete for name, each
// checked: durable, and no client pulling from it.
func (o *Ops) durablesOf(ctx context.Context, name string) ([]*jetstream.ConsumerInfo, error) {
	s, err := o.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream.Hooks, err)
	}
	var out []*jetstream.ConsumerInfo
	list := s.ListConsumers(ctx)
	for ci := range list.Info() { // read to the end: the lister waits for its reader
		owner, p := stream.ConsumerOfDurable(ci.Name)
		if ci.Name == name || (owner == name && p >= 0) {
			out = append(out, ci)
		}
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("list consumers of %s: %w", stream.Hooks, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no consumer %s on %s: %w", name, stream.Hooks, ErrNotFound)
	}
	for _, ci := range out {
		switch {
		case ci.Config.Durable == "":
			return nil, fmt.Errorf("%s is not a durable consumer; it goes by itself when unused: %w", ci.Name, ErrInvalid)
		case ci.NumWaiting > 0:
			return nil, fmt.Errorf("a client pulls from %s (%d waiting requests): a running serve whose configuration names it? Stop it first: %w",
				ci.Name, ci.NumWaiting, ErrNotApplied)
		}
	}
	return out, nil
}
