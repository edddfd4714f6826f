package ops

import (
	"errors"
	"fmt"
	"time"
)

// A dead letter of a keyed event (its source has an ordering key) lets
// the later events of its key go on; the first of them to apply is
// recorded on the row (passed_at, passed_by_event, passed_by_seq).
// Applying such a dead letter afterwards applies an older event of the
// key after a newer one. Requeue and `replay --dead-letters` therefore
// leave a passed dead letter alone unless the operator asks for it
// explicitly (RequeueOptions.OutOfOrder, ReplaySelectors.OutOfOrder).
//
// The mark is written in the later event's own transaction, which locks
// the row; a requeue locks it too and reads the mark under that lock, in
// the transaction that applies the dead letter. So a requeue either
// commits before the later event does (and is in order) or finds the mark
// and applies nothing (a [*PassedError]), even when the later event
// applies while the requeue runs.

// ErrOutOfOrder: the dead letter was passed by a later event of its
// ordering key, and applying it now would apply it out of order.
var ErrOutOfOrder = errors.New("a later event of its ordering key has applied")

// PassedBy names the later event of a dead letter's ordering key that
// applied after it was dead-lettered (the first one).
type PassedBy struct {
	EventID   string    `json:"event_id"`
	StreamSeq uint64    `json:"stream_seq"`
	At        time.Time `json:"at"`
}

func (p PassedBy) String() string {
	return fmt.Sprintf("%s (stream seq %d) applied at %s", p.EventID, p.StreamSeq, p.At.UTC().Format(time.RFC3339))
}

// Passed returns what passed d, nil when nothing has (or d is unkeyed).
func Passed(d DeadLetter) *PassedBy {
	if d.PassedAt == nil {
		return nil
	}
	return &PassedBy{EventID: d.PassedByEvent, StreamSeq: d.PassedBySeq, At: d.PassedAt.UTC()}
}

// PassedError refuses to apply a dead letter that a later event of its
// ordering key has passed. It wraps [ErrOutOfOrder].
type PassedError struct {
	ID        int64
	StreamSeq uint64
	PassedBy  PassedBy
}

func (e *PassedError) Error() string {
	return fmt.Sprintf("dead letter %d (stream seq %d) was passed by a later event of its ordering key: %s; "+
		"applying it now would apply it after that event, out of order", e.ID, e.StreamSeq, e.PassedBy)
}

func (e *PassedError) Unwrap() error { return ErrOutOfOrder }

// SkippedDeadLetter is a dead letter a replay left alone because a later
// event of its ordering key had passed it.
type SkippedDeadLetter struct {
	ID        int64    `json:"id"`
	Source    string   `json:"source"`
	EventID   string   `json:"event_id"`
	EventType string   `json:"event_type"`
	StreamSeq uint64   `json:"stream_seq"`
	PassedBy  PassedBy `json:"passed_by"`
}
