package consumer

import "fmt"

// Result is the outcome of one event of a batch.
type Result struct {
	Outcome Outcome
	Err     error // set when Outcome is Failed
}

// Outcome is what applying one event did.
type Outcome int

const (
	// Failed: the handler or the database failed; nothing was applied and
	// the message will be redelivered.
	Failed Outcome = iota
	// Processed: a new event, applied once.
	Processed
	// Duplicate: the event was applied before with the same body; nothing
	// changed.
	Duplicate
	// Conflict: the event id was applied before with a different body; the
	// new body was recorded in hookbridge.conflicts and not applied.
	Conflict
	// DeadLettered: the message was recorded in hookbridge.dead_letters
	// and terminated; it is not delivered again unless replayed.
	DeadLettered
	// Postponed: the handler said the event needs a later event of its
	// ordering key first ([Postpone]); nothing was applied, and it is
	// tried again after the key's next event (or the backoff).
	Postponed

	// The outcomes below are a replay's only.

	// ReplayNew: --dry-run only, the inbox has no row; applying would
	// process the event.
	ReplayNew
	// ReplayMissing: a dead letter whose message has left the stream
	// (max_age or max_bytes); it cannot be replayed.
	ReplayMissing
	// ReplayMismatch: the dead letter's stream sequence now holds another
	// event (the stream was recreated); it is left alone.
	ReplayMismatch
	// ReplayUnusable: the message has no identity and can never apply.
	ReplayUnusable
	// ReplayHeld: not applied because an earlier event of its ordering
	// key failed, was postponed, or is not applied yet (the live consumer
	// holds it, or it lies before the replayed range): applying it would
	// apply it before that one.
	ReplayHeld
)

// outcomeNames are the outcomes' names in metrics labels, logs, JSON and
// the command line.
var outcomeNames = [...]string{
	Failed:         "failed",
	Processed:      "processed",
	Duplicate:      "duplicate",
	Conflict:       "conflict",
	DeadLettered:   "dead_lettered",
	Postponed:      "postponed",
	ReplayNew:      "new",
	ReplayMissing:  "missing",
	ReplayMismatch: "mismatch",
	ReplayUnusable: "unusable",
	ReplayHeld:     "held",
}

func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "failed"
}

// MarshalText writes the outcome's name, so JSON holds "processed" rather
// than a number.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads an outcome's name.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, n := range outcomeNames {
		if n == string(b) {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("unknown outcome %q", b)
}
