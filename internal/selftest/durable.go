package selftest

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// Removal is what [RemoveDurable] did.
type Removal struct {
	// Deleted are the durables removed from HOOKS.
	Deleted []string `json:"deleted"`
	// Purged counts the self-test's messages purged from HOOKS first.
	Purged uint64 `json:"hooks_messages_purged"`
	// Kept says why the durables stayed ("" when none did).
	Kept string `json:"kept,omitempty"`
}

func (r Removal) String() string {
	switch {
	case r.Kept != "":
		return "durable kept: " + r.Kept
	case len(r.Deleted) == 0:
		return "no self-test durable on " + stream.Hooks
	}
	return fmt.Sprintf("deleted durable %v from %s (and the self-test's %d messages there)", r.Deleted, stream.Hooks, r.Purged)
}

// hooksSubjects are the subjects of the self-test's deliveries in HOOKS:
// its source has no ordering key, but one configured would put them on
// partition subjects.
var hooksSubjects = []string{stream.HooksRoot + "." + Source + ".>", stream.HooksKeyedRoot + ".*." + Source + ".>"}

// RemoveDurable deletes the self-test consumer's durables from HOOKS.
// Once serve no longer runs the self-test, such a durable would keep
// every self-test message it has not acked there for good, and holds the
// storage guard's floor.
//
// The self-test's messages are purged from HOOKS first: a durable made
// later (the self-test enabled again) starts from the stream's first
// message, and would apply again the runs whose rows were removed. A
// durable a client still pulls from (a serve that runs the self-test) is
// kept: that serve would make it again at once.
func RemoveDurable(ctx context.Context, js jetstream.JetStream) (Removal, error) {
	out := Removal{Deleted: []string{}}
	hooks, err := js.Stream(ctx, stream.Hooks)
	if err != nil {
		return out, fmt.Errorf("selftest: stream %s: %w", stream.Hooks, err)
	}
	var names []string
	list := hooks.ListConsumers(ctx)
	for ci := range list.Info() { // read to the end: the lister waits for its reader
		if owner, _ := stream.ConsumerOfDurable(ci.Name); owner != Consumer || ci.Config.Durable == "" {
			continue
		}
		if ci.NumWaiting > 0 && out.Kept == "" {
			out.Kept = fmt.Sprintf("a client pulls from %s (a serve that runs the self-test, which would make it again)", ci.Name)
		}
		names = append(names, ci.Name)
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return out, fmt.Errorf("selftest: list consumers of %s: %w", stream.Hooks, err)
	}
	if len(names) == 0 || out.Kept != "" {
		return out, nil
	}
	if out.Purged, err = purgeHooks(ctx, hooks); err != nil {
		return out, err
	}
	for _, name := range names {
		if err := hooks.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return out, fmt.Errorf("selftest: delete durable %s: %w", name, err)
		}
		out.Deleted = append(out.Deleted, name)
	}
	return out, nil
}

// purgeHooks purges the self-test's messages from HOOKS and returns how
// many there were.
func purgeHooks(ctx context.Context, hooks jetstream.Stream) (uint64, error) {
	var n uint64
	for _, subj := range hooksSubjects {
		info, err := hooks.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return n, fmt.Errorf("selftest: stream %s: %w", stream.Hooks, err)
		}
		for _, c := range info.State.Subjects {
			n += c
		}
		if err := hooks.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return n, fmt.Errorf("selftest: purge %s from %s: %w", subj, stream.Hooks, err)
		}
	}
	return n, nil
}
