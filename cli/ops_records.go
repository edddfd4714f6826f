package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/hookbridge/hookbridge/internal/ops"
	"github.com/hookbridge/hookbridge/internal/store"
)

// deadLettersCmd inspects hookbridge.dead_letters.
type deadLettersCmd struct {
	List    deadLettersListCmd    `cmd:"" default:"withargs" help:"List dead letters (unresolved by default), without bodies."`
	Show    deadLettersShowCmd    `cmd:"" help:"Show one dead letter with its body."`
	Requeue deadLettersRequeueCmd `cmd:"" help:"Re-deliver one dead letter through HOOKS and the inbox (like replay --dead-letters for that row); resolves it once applied."`
	Discard deadLettersDiscardCmd `cmd:"" help:"Mark one dead letter discarded with a reason (the row is kept)."`
}

// deadLettersListCmd lists dead letters.
type deadLettersListCmd struct {
	Consumer string `help:"Only this consumer."`
	All      bool   `help:"Include resolved dead letters."`
	Limit    int    `help:"At most this many rows." default:"100"`
	Cursor   int64  `help:"Start after this row: the next_cursor of the previous page."`
	JSON     bool   `help:"Print JSON (the admin API's GET /api/v1/dead-letters)."`
	dbFlags
}

// Run implements `dead-letters list`.
func (c *deadLettersListCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		resolved := store.Unresolved
		if c.All {
			resolved = store.AnyResolved
		}
		list, err := o.ListDeadLetters(ctx, ops.DeadLetterPage{Consumer: c.Consumer, Resolved: resolved, Before: c.Cursor, Limit: max(c.Limit, 1)})
		if err != nil {
			return fmt.Errorf("dead-letters: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, list)
		}
		t := newTable(rt.stdout, "ID", "CONSUMER", "SEQ", "SOURCE", "EVENT ID", "TYPE", "DELIVERIES", "REASON", "DEAD AT", "RESOLVED", "PASSED", "LAST ERROR")
		passed := 0
		for _, d := range list.Items {
			mark := "-"
			if d.PassedBy != nil {
				mark = fmt.Sprintf("by seq %d", d.PassedBy.StreamSeq)
				passed++
			}
			t.row(fmt.Sprint(d.ID), d.Consumer, fmt.Sprint(d.StreamSeq), d.Source, d.EventID, d.EventType,
				fmt.Sprint(d.Deliveries), d.Reason, fmtTime(d.DeadAt), fmtTimePtr(d.ResolvedAt), mark, clip(d.LastError, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if passed > 0 {
			fmt.Fprintf(rt.stdout, "PASSED: a later event of the ordering key applied after %d of these; requeueing one applies it out of order "+
				"and needs --out-of-order (dead-letters show ID names the event)\n", passed)
		}
		printMore(rt.stdout, list.NextCursor)
		return nil
	})
}

// printMore says how to list the next page, when there is one.
func printMore(w io.Writer, next *string) {
	if next != nil {
		fmt.Fprintf(w, "more: --cursor %s lists the next page\n", *next)
	}
}

// deadLettersShowCmd shows one dead letter.
type deadLettersShowCmd struct {
	ID   int64 `arg:"" help:"Dead letter id (from list)."`
	JSON bool  `help:"Print JSON (the admin API's GET /api/v1/dead-letters/{id})."`
	dbFlags
}

// Run implements `dead-letters show`.
func (c *deadLettersShowCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		d, err := o.ShowDeadLetter(ctx, c.ID)
		if err != nil {
			return fmt.Errorf("dead-letters: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, d)
		}
		resolved := "no"
		if d.ResolvedAt != nil {
			resolved = fmtTime(*d.ResolvedAt) + " (" + deref(d.Resolution) + ")"
		}
		return printRecord(rt.stdout, append([][2]string{
			{"id", fmt.Sprint(d.ID)}, {"consumer", d.Consumer}, {"source", d.Source}, {"event id", d.EventID},
			{"type", d.EventType}, {"subject", d.Subject}, {"stream seq", fmt.Sprint(d.StreamSeq)},
			{"deliveries", fmt.Sprint(d.Deliveries)}, {"reason", d.Reason}, {"dead at", fmtTime(d.DeadAt)},
			{"resolved", resolved}}, append(orderingFields(d.DeadLetterView), [2]string{"last error", d.LastError})...), d.RawBody())
	})
}

// orderingFields are the ordering key of a keyed dead letter and, once a
// later event of that key applied, which one and when.
func orderingFields(d ops.DeadLetterView) [][2]string {
	if d.OrderingKey == nil {
		return nil
	}
	out := [][2]string{{"ordering key", *d.OrderingKey}}
	if d.PassedBy == nil {
		return append(out, [2]string{"passed", "no: no later event of its key has applied"})
	}
	passed := fmt.Sprintf("by %s, a later event of its key", d.PassedBy)
	if d.ResolvedAt == nil {
		passed += ": requeueing it now applies it out of order (needs --out-of-order)"
	}
	return append(out, [2]string{"passed", passed})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// conflictsCmd inspects hookbridge.conflicts.
type conflictsCmd struct {
	List    conflictsListCmd    `cmd:"" default:"withargs" help:"List conflicts, without bodies."`
	Show    conflictsShowCmd    `cmd:"" help:"Show one conflict with both bodies: the original (read back from HOOKS) and the rejected one."`
	Resolve conflictsResolveCmd `cmd:"" help:"Mark one conflict resolved (the row is kept)."`
}

// conflictsListCmd lists conflicts.
type conflictsListCmd struct {
	Limit  int   `help:"At most this many rows (newest first)." default:"100"`
	Cursor int64 `help:"Start after this row: the next_cursor of the previous page."`
	JSON   bool  `help:"Print JSON (the admin API's GET /api/v1/conflicts?resolved=all)."`
	dbFlags
}

// Run implements `conflicts list`.
func (c *conflictsListCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		list, err := o.ListConflicts(ctx, ops.ConflictPage{Resolved: store.AnyResolved, Before: c.Cursor, Limit: max(c.Limit, 1)})
		if err != nil {
			return fmt.Errorf("conflicts: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, list)
		}
		t := newTable(rt.stdout, "ID", "DETECTED BY", "SOURCE", "EVENT ID", "TYPE", "ORIGINAL SEQ", "REJECTED SEQ", "DETECTED AT")
		for _, x := range list.Items {
			t.row(fmt.Sprint(x.ID), x.DetectedBy, x.Source, x.EventID, x.EventType, seqCell(x.OriginalSeq), seqCell(x.RejectedSeq), fmtTime(x.DetectedAt))
		}
		if err := t.flush(); err != nil {
			return err
		}
		printMore(rt.stdout, list.NextCursor)
		return nil
	})
}

// conflictsShowCmd shows one conflict.
type conflictsShowCmd struct {
	ID   int64 `arg:"" help:"Conflict id (from list)."`
	JSON bool  `help:"Print JSON (the admin API's GET /api/v1/conflicts/{id})."`
	natsFlags
	allFlags
}

// Run implements `conflicts show`: both bodies, as the console shows
// them. The original is read back from HOOKS; without JetStream the
// rejected body is still printed, and why the original is not.
func (c *conflictsShowCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOptionalJS(ctx, cfg, rt, c.natsFlags, func(o *ops.Ops, jsErr error) error {
		x, err := o.ShowConflict(ctx, c.ID)
		if errors.Is(err, ops.ErrNotFound) {
			return fmt.Errorf("conflicts: conflict %d not found", c.ID)
		}
		if err != nil {
			return fmt.Errorf("conflicts: %w", dbError(err))
		}
		if jsErr != nil {
			x.OriginalMissing = "HOOKS not reachable: " + jsErr.Error()
		}
		if c.JSON {
			return writeJSON(rt.stdout, x)
		}
		return printConflict(rt.stdout, x)
	})
}

func printConflict(w io.Writer, x ops.ConflictWithBodies) error {
	t := newTable(w, "FIELD", "VALUE")
	for _, f := range [][2]string{
		{"id", fmt.Sprint(x.ID)}, {"detected by", x.DetectedBy}, {"source", x.Source}, {"event id", x.EventID},
		{"type", x.EventType}, {"original seq", seqCell(x.OriginalSeq)}, {"original sha256", x.OriginalSHA256},
		{"rejected seq", seqCell(x.RejectedSeq)}, {"rejected sha256", x.RejectedSHA256}, {"detected at", fmtTime(x.DetectedAt)},
	} {
		t.row(f[0], f[1])
	}
	if err := t.flush(); err != nil {
		return err
	}
	if x.OriginalMissing != "" {
		fmt.Fprintf(w, "\noriginal body: not shown: %s\n", x.OriginalMissing)
	} else {
		printBody(w, "original body (applied)", x.RawOriginal())
	}
	printBody(w, "rejected body", x.RawRejected())
	return nil
}

// printRecord prints labelled fields, then the body verbatim.
func printRecord(w io.Writer, fields [][2]string, body []byte) error {
	t := newTable(w, "FIELD", "VALUE")
	for _, f := range fields {
		t.row(f[0], f[1])
	}
	if err := t.flush(); err != nil {
		return err
	}
	printBody(w, "body", body)
	return nil
}

// printBody prints a titled body verbatim, or as a hex dump when it is
// not UTF-8.
func printBody(w io.Writer, title string, body []byte) {
	fmt.Fprintf(w, "\n%s (%d bytes):\n", title, len(body))
	if !utf8.Valid(body) {
		fmt.Fprintln(w, hex.Dump(body))
		return
	}
	fmt.Fprintln(w, string(body))
}

func seqCell(seq uint64) string {
	if seq == 0 {
		return "-"
	}
	return fmt.Sprint(seq)
}
