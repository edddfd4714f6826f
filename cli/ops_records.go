package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/app"
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
	JSON     bool   `help:"Print JSON."`
	dbFlags
}

// Run implements `dead-letters list`.
func (c *deadLettersListCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	return withPool(ctx, g, rt, func(pool *pgxpool.Pool) error {
		resolved := store.Unresolved
		if c.All {
			resolved = store.AnyResolved
		}
		dls, err := (&ops.Ops{Pool: pool}).ListDeadLetters(ctx, ops.DeadLetterPage{Consumer: c.Consumer, Resolved: resolved, Limit: max(c.Limit, 1)})
		if err != nil {
			return fmt.Errorf("dead-letters: %w", dbError(err))
		}
		if c.JSON {
			if dls == nil {
				dls = []ops.DeadLetter{}
			}
			return writeJSON(rt.stdout, dls)
		}
		t := newTable(rt.stdout, "ID", "CONSUMER", "SEQ", "SOURCE", "EVENT ID", "TYPE", "DELIVERIES", "REASON", "DEAD AT", "RESOLVED", "PASSED", "LAST ERROR")
		passed := 0
		for _, d := range dls {
			resolved := "-"
			if d.ResolvedAt != nil {
				resolved = fmtTime(*d.ResolvedAt)
			}
			mark := "-"
			if pb := ops.Passed(d); pb != nil {
				mark = fmt.Sprintf("by seq %d", pb.StreamSeq)
				passed++
			}
			t.row(fmt.Sprint(d.ID), d.Consumer, fmt.Sprint(d.StreamSeq), d.Source, d.EventID, d.EventType,
				fmt.Sprint(d.Deliveries), d.Reason, fmtTime(d.DeadAt), resolved, mark, clip(d.LastError, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if passed > 0 {
			fmt.Fprintf(rt.stdout, "PASSED: a later event of the ordering key applied after %d of these; requeueing one applies it out of order "+
				"and needs --out-of-order (dead-letters show ID names the event)\n", passed)
		}
		return nil
	})
}

// deadLettersShowCmd shows one dead letter.
type deadLettersShowCmd struct {
	ID   int64 `arg:"" help:"Dead letter id (from list)."`
	JSON bool  `help:"Print JSON."`
	dbFlags
}

// Run implements `dead-letters show`.
func (c *deadLettersShowCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	return withPool(ctx, g, rt, func(pool *pgxpool.Pool) error {
		d, err := (&ops.Ops{Pool: pool}).GetDeadLetter(ctx, c.ID)
		if err != nil {
			return fmt.Errorf("dead-letters: %w", dbError(err))
		}
		body := d.Body
		d.Body = nil
		if c.JSON {
			return writeJSON(rt.stdout, struct {
				ops.DeadLetter
				bodyView
			}{d, viewBody(body)})
		}
		resolved := "no"
		if d.ResolvedAt != nil {
			resolved = fmtTime(*d.ResolvedAt) + " (" + d.Resolution + ")"
		}
		return printRecord(rt.stdout, append([][2]string{
			{"id", fmt.Sprint(d.ID)}, {"consumer", d.Consumer}, {"source", d.Source}, {"event id", d.EventID},
			{"type", d.EventType}, {"subject", d.Subject}, {"stream seq", fmt.Sprint(d.StreamSeq)},
			{"deliveries", fmt.Sprint(d.Deliveries)}, {"reason", d.Reason}, {"dead at", fmtTime(d.DeadAt)},
			{"resolved", resolved}}, append(orderingFields(d), [2]string{"last error", d.LastError})...), body)
	})
}

// orderingFields are the ordering key of a keyed dead letter and, once a
// later event of that key applied, which one and when.
func orderingFields(d ops.DeadLetter) [][2]string {
	if d.OrderingKey == "" {
		return nil
	}
	out := [][2]string{{"ordering key", d.OrderingKey}}
	pb := ops.Passed(d)
	if pb == nil {
		return append(out, [2]string{"passed", "no: no later event of its key has applied"})
	}
	passed := fmt.Sprintf("by %s, a later event of its key", pb)
	if d.ResolvedAt == nil {
		passed += ": requeueing it now applies it out of order (needs --out-of-order)"
	}
	return append(out, [2]string{"passed", passed})
}

// conflictsCmd inspects hookbridge.conflicts.
type conflictsCmd struct {
	List    conflictsListCmd    `cmd:"" default:"withargs" help:"List conflicts, without bodies."`
	Show    conflictsShowCmd    `cmd:"" help:"Show one conflict with both bodies: the original (read back from HOOKS) and the rejected one."`
	Resolve conflictsResolveCmd `cmd:"" help:"Mark one conflict resolved (the row is kept)."`
}

// conflictsListCmd lists conflicts.
type conflictsListCmd struct {
	Limit int  `help:"At most this many rows (newest first)." default:"100"`
	JSON  bool `help:"Print JSON."`
	dbFlags
}

// Run implements `conflicts list`.
func (c *conflictsListCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	return withPool(ctx, g, rt, func(pool *pgxpool.Pool) error {
		stored, err := (&ops.Ops{Pool: pool}).ListConflicts(ctx, ops.ConflictPage{Resolved: store.AnyResolved, Limit: max(c.Limit, 1)})
		if err != nil {
			return fmt.Errorf("conflicts: %w", dbError(err))
		}
		list := make([]ops.ConflictView, 0, len(stored))
		for _, x := range stored {
			list = append(list, ops.ViewConflict(x))
		}
		if c.JSON {
			return writeJSON(rt.stdout, list)
		}
		t := newTable(rt.stdout, "ID", "DETECTED BY", "SOURCE", "EVENT ID", "TYPE", "ORIGINAL SEQ", "REJECTED SEQ", "DETECTED AT")
		for _, x := range list {
			t.row(fmt.Sprint(x.ID), x.DetectedBy, x.Source, x.EventID, x.EventType, seqCell(x.OriginalSeq), seqCell(x.RejectedSeq), fmtTime(x.DetectedAt))
		}
		return t.flush()
	})
}

// conflictsShowCmd shows one conflict.
type conflictsShowCmd struct {
	ID   int64 `arg:"" help:"Conflict id (from list)."`
	JSON bool  `help:"Print JSON."`
	natsFlags
	allFlags
}

// conflictJSON is `conflicts show --json`: the conflict, the rejected
// body as body (or body_base64), and the original body when HOOKS still
// holds it, else why not.
type conflictJSON struct {
	ops.ConflictView
	bodyView
	OriginalBody       *string `json:"original_body,omitempty"`
	OriginalBodyBase64 []byte  `json:"original_body_base64,omitempty"`
	OriginalMissing    string  `json:"original_missing,omitempty"`
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
		d, err := o.GetConflict(ctx, c.ID)
		if errors.Is(err, ops.ErrNotFound) {
			return fmt.Errorf("conflicts: conflict %d not found", c.ID)
		}
		if err != nil {
			return fmt.Errorf("conflicts: %w", dbError(err))
		}
		if jsErr != nil {
			d.OriginalMissing = "HOOKS not reachable: " + jsErr.Error()
		}
		x := ops.ViewConflict(d.Conflict)
		if c.JSON {
			out := conflictJSON{ConflictView: x, bodyView: viewBody(d.RejectedBody), OriginalMissing: d.OriginalMissing}
			if d.OriginalMissing == "" {
				orig := viewBody(d.OriginalBody)
				out.OriginalBody, out.OriginalBodyBase64 = orig.Body, orig.BodyBase64
			}
			return writeJSON(rt.stdout, out)
		}
		return printConflict(rt.stdout, x, d)
	})
}

func printConflict(w io.Writer, x ops.ConflictView, d ops.ConflictDetail) error {
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
	if d.OriginalMissing != "" {
		fmt.Fprintf(w, "\noriginal body: not shown: %s\n", d.OriginalMissing)
	} else {
		printBody(w, "original body (applied)", d.OriginalBody)
	}
	printBody(w, "rejected body", d.RejectedBody)
	return nil
}

// withPool loads the configuration, opens the database and runs fn.
func withPool(ctx context.Context, g *Globals, rt *runtime, fn func(pool *pgxpool.Pool) error) error {
	return withConfigPool(ctx, g, rt, func(_ app.Config, pool *pgxpool.Pool) error { return fn(pool) })
}

// withConfigPool is withPool for commands that need the configuration too.
func withConfigPool(ctx context.Context, g *Globals, rt *runtime, fn func(cfg app.Config, pool *pgxpool.Pool) error) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	pool, err := opsPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(cfg, pool)
}

// bodyView carries a body in JSON: as text when it is UTF-8, else base64.
type bodyView struct {
	Body       *string `json:"body,omitempty"`
	BodyBase64 []byte  `json:"body_base64,omitempty"`
}

func viewBody(b []byte) bodyView {
	if utf8.Valid(b) {
		s := string(b)
		return bodyView{Body: &s}
	}
	return bodyView{BodyBase64: b}
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
