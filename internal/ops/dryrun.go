package ops

import (
	"context"
	"fmt"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/engine"
)

// DryRunNote is what a dry run says of one message beyond what the inbox
// would make of it: the message is one of the consumer's unresolved dead
// letters, and what the real run will do with it (see [ReplayItem]).
type DryRunNote struct {
	DeadLetterID int64  `json:"dead_letter_id,omitempty"`
	Note         string `json:"note,omitempty"`
	// PassedBy is the later event of its ordering key that applied after
	// it; Skipped says the real run leaves it alone for that reason (a
	// `--dead-letters` run without --out-of-order).
	PassedBy *PassedBy `json:"passed_by,omitempty"`
	Skipped  bool      `json:"skipped,omitempty"`
}

// dryRunNotes reads the consumer's unresolved dead letters in the range
// sel selects, once, and returns what a dry run says of each item: nil
// for a message that is no dead letter. A dead-lettered event has no
// inbox row, so the inbox alone calls it new, as if the real run would
// simply apply it; it applies it again, and what failed before fails
// again unless its cause was fixed. A dead letter a later event of its
// ordering key has passed is noted with that event: a real
// `--dead-letters` run leaves it alone (Skipped) unless sel.OutOfOrder,
// and a range replay applies it after that event.
func (o *Ops) dryRunNotes(ctx context.Context, name string, sel ReplaySelectors) (func(engine.ReplayItem) *DryRunNote, error) {
	dls, err := engine.ListDeadLetters(ctx, o.Pool, engine.DeadLetterFilter{
		Consumer: name, UnresolvedOnly: true, FromSeq: sel.FromSeq, ToSeq: sel.ToSeq,
	})
	if err != nil {
		return nil, fmt.Errorf("dry run %s: %w", name, err)
	}
	bySeq := make(map[uint64]engine.DeadLetter, len(dls))
	for _, d := range dls {
		bySeq[d.StreamSeq] = d
	}
	return func(it engine.ReplayItem) *DryRunNote {
		d, ok := bySeq[it.Seq]
		if !ok || d.Source != it.Source || d.EventID != it.EventID {
			return nil
		}
		note := &DryRunNote{DeadLetterID: d.ID, Note: dryRunNote(d, it.Outcome)}
		if pb := Passed(d); pb != nil && it.Outcome == consumer.ReplayNew {
			note.PassedBy = pb
			note.Skipped = sel.DeadLetters && !sel.OutOfOrder
			note.Note = passedNote(d, *pb, note.Skipped)
		}
		return note
	}, nil
}

// passedNote says what the real run does with dead letter d, which the
// later event pb of its ordering key has passed.
func passedNote(d engine.DeadLetter, pb PassedBy, skipped bool) string {
	if skipped {
		return fmt.Sprintf("dead letter %d, passed by a later event of its ordering key, %s: the real run leaves it alone "+
			"(--out-of-order applies it after that event)", d.ID, pb)
	}
	return fmt.Sprintf("dead letter %d, passed by a later event of its ordering key, %s: the real run applies it after that event, out of order",
		d.ID, pb)
}

// dryRunNote says what the real run does with dead letter d, whose
// message the inbox would take as outcome.
func dryRunNote(d engine.DeadLetter, outcome consumer.Outcome) string {
	switch outcome {
	case consumer.Duplicate:
		return fmt.Sprintf("dead letter %d, applied since: the real run marks it resolved", d.ID)
	case consumer.Conflict:
		return fmt.Sprintf("dead letter %d: its id was applied with another body; the real run records a conflict and the dead letter stays", d.ID)
	default:
		return fmt.Sprintf("dead letter %d (%s after %d deliveries: %s): the real run applies it again; unless that cause was fixed it fails again, is counted failed and stays a dead letter",
			d.ID, d.Reason, d.Deliveries, d.LastError)
	}
}
