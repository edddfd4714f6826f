package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// The operator actions of the command line; each is the same function
// the admin API calls (package ops), so both do exactly the same.

// deadLettersRequeueCmd requeues one dead letter.
type deadLettersRequeueCmd struct {
	ID         int64 `arg:"" help:"Dead letter id (from list)."`
	OutOfOrder bool  `name:"out-of-order" help:"Apply it even though a later event of its ordering key has applied since (dead-letters show names it): it then applies after that event."`
	JSON       bool  `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements `dead-letters requeue`.
func (c *deadLettersRequeueCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		res, err := o.RequeueDeadLetter(ctx, c.ID, ops.RequeueOptions{OutOfOrder: c.OutOfOrder})
		if errors.Is(err, ops.ErrOutOfOrder) {
			return fmt.Errorf("dead-letters requeue: %w; nothing was applied. To apply it anyway, after that event: "+
				"hookbridge dead-letters requeue %d --out-of-order", err, c.ID)
		}
		if err != nil {
			return fmt.Errorf("dead-letters requeue: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, res)
		}
		switch res.Status {
		case ops.StatusRequeued:
			fmt.Fprintf(rt.stdout, "dead letter %d requeued: seq %d %s, resolved\n", res.ID, res.StreamSeq, res.Outcome)
			if res.OutOfOrder {
				fmt.Fprintf(rt.stdout, "applied OUT OF ORDER: after %s, a later event of its ordering key\n", res.PassedBy)
			}
		default:
			fmt.Fprintf(rt.stdout, "dead letter %d was already resolved; nothing changed\n", res.ID)
		}
		return nil
	})
}

// deadLettersDiscardCmd discards one dead letter.
type deadLettersDiscardCmd struct {
	ID     int64  `arg:"" help:"Dead letter id (from list)."`
	Reason string `help:"Why it is discarded (kept with the row)." required:""`
	JSON   bool   `help:"Print JSON."`
	dbFlags
}

// Run implements `dead-letters discard`.
func (c *deadLettersDiscardCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		status, err := o.DiscardDeadLetter(ctx, c.ID, c.Reason)
		if err != nil {
			return fmt.Errorf("dead-letters discard: %w", dbError(err))
		}
		return printStatusLine(rt, c.JSON, "dead letter", c.ID, status)
	})
}

// conflictsResolveCmd resolves one conflict.
type conflictsResolveCmd struct {
	ID         int64  `arg:"" help:"Conflict id (from list)."`
	Resolution string `help:"What was decided (kept with the row)." default:"resolved"`
	JSON       bool   `help:"Print JSON."`
	dbFlags
}

// Run implements `conflicts resolve`.
func (c *conflictsResolveCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		status, err := o.ResolveConflict(ctx, c.ID, c.Resolution)
		if err != nil {
			return fmt.Errorf("conflicts resolve: %w", dbError(err))
		}
		return printStatusLine(rt, c.JSON, "conflict", c.ID, status)
	})
}

// outboxCmd inspects and requeues hookbridge.outbox rows.
type outboxCmd struct {
	List    outboxListCmd    `cmd:"" default:"withargs" help:"List pending (or, with --dead, dead) outbox rows, newest first."`
	Requeue outboxRequeueCmd `cmd:"" help:"Put a dead outbox row back to pending, due now, attempts reset."`
}

// outboxListCmd lists outbox rows.
type outboxListCmd struct {
	Dead   bool  `help:"List the dead rows (the relay gave up on them)."`
	Limit  int   `help:"At most this many rows." default:"100"`
	Cursor int64 `help:"Start after this row: the next_cursor of the previous page."`
	JSON   bool  `help:"Print JSON (the admin API's GET /api/v1/outbox)."`
	dbFlags
}

// Run implements `outbox list`.
func (c *outboxListCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	state := "pending"
	if c.Dead {
		state = "dead"
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		list, err := o.ListOutbox(ctx, state, c.Cursor, max(c.Limit, 1))
		if err != nil {
			return fmt.Errorf("outbox: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, list)
		}
		t := newTable(rt.stdout, "ID", "EVENT ID", "SUBJECT", "ATTEMPTS", "CREATED", "NEXT ATTEMPT", "LAST ERROR")
		for _, r := range list.Items {
			t.row(fmt.Sprint(r.ID), r.EventID, r.Subject, fmt.Sprint(r.Attempts), fmtTime(r.CreatedAt), fmtTime(r.NextAttemptAt), clip(r.LastError, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
		printMore(rt.stdout, list.NextCursor)
		return nil
	})
}

// outboxRequeueCmd requeues one dead outbox row.
type outboxRequeueCmd struct {
	ID   int64 `arg:"" help:"Outbox row id (from list --dead)."`
	JSON bool  `help:"Print JSON."`
	dbFlags
}

// Run implements `outbox requeue`.
func (c *outboxRequeueCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		status, err := o.RequeueOutbox(ctx, c.ID)
		if err != nil {
			return fmt.Errorf("outbox requeue: %w", dbError(err))
		}
		return printStatusLine(rt, c.JSON, "outbox row", c.ID, status)
	})
}

// eventsCmd follows events.
type eventsCmd struct {
	Show eventsShowCmd `cmd:"" help:"Show the life of one event: stored in HOOKS, each consumer's outcome (with the failures of one being retried), its dead letters and conflicts, the outbox rows it wrote and their delivery to each endpoint. With one argument, an outgoing event's (webhook-id's) delivery history per endpoint."`
}

// eventsShowCmd shows one event's life.
type eventsShowCmd struct {
	Source  string `arg:"" help:"Source name (as configured); alone, an outgoing event's id (its webhook-id, the outbox message's id)."`
	EventID string `arg:"" optional:"" help:"Event id (as the sender gave it)."`
	JSON    bool   `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements `events show`.
func (c *eventsShowCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	if c.EventID == "" {
		return c.deliveries(ctx, cfg, rt)
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		life, err := o.EventLife(ctx, c.Source, c.EventID)
		if err != nil {
			return fmt.Errorf("events show: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, life)
		}
		return printEventLife(rt.stdout, life)
	})
}

// deliveries implements `events show ID`: an outgoing event's delivery
// history (Postgres only).
func (c *eventsShowCmd) deliveries(ctx context.Context, cfg app.Config, rt *runtime) error {
	return withOps(ctx, cfg, rt, c.natsFlags, false, func(o *ops.Ops) error {
		h, err := o.DeliveryHistory(ctx, c.Source)
		if err != nil {
			return fmt.Errorf("events show: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, h)
		}
		if len(h.Endpoints) == 0 {
			return fmt.Errorf("events show: no endpoint has a delivery of %s (give a source and an event id for an incoming event): %w",
				c.Source, ops.ErrNotFound)
		}
		return printDeliveryHistory(rt.stdout, h)
	})
}

// printEventLife prints an event's life: where HOOKS holds it, what each
// consumer did (with the failures of one being retried), its dead letters
// and conflicts, resolved ones included, by the ids `dead-letters show`
// and `conflicts show` take, and its outbox rows.
func printEventLife(w io.Writer, life ops.EventLife) error {
	if life.Stored != nil {
		fmt.Fprintf(w, "%s/%s stored in %s at seq %d, subject %s, received %s\n\n", life.Source, life.EventID,
			life.Stored.Stream, life.Stored.Seq, life.Stored.Subject, fmtTime(life.Stored.ReceivedAt))
	} else {
		fmt.Fprintf(w, "%s/%s is not in HOOKS (any more)\n\n", life.Source, life.EventID)
	}
	t := newTable(w, "CONSUMER", "STATE", "SEQ", "PROCESSED AT", "DEAD LETTER", "FAILURES", "POSTPONED SINCE", "LAST FAILED", "LAST ERROR")
	for _, at := range life.Consumers {
		dl, failures := "-", "-"
		if at.DeadLetterID != nil {
			dl = fmt.Sprint(*at.DeadLetterID)
		}
		if at.Failures > 0 {
			failures = fmt.Sprint(at.Failures)
		}
		t.row(at.Name, at.State, seqCell(at.StreamSeq), fmtTimePtr(at.ProcessedAt), dl, failures, fmtTimePtr(at.PostponedSince),
			fmtTimePtr(at.LastFailedAt), clip(at.LastError, 100))
	}
	if err := t.flush(); err != nil {
		return err
	}
	sections := []func(io.Writer, ops.EventLife) error{printLifeDeadLetters, printLifeConflicts, printLifeOutbox, printLifeDeliveries}
	for _, section := range sections {
		if err := section(w, life); err != nil {
			return err
		}
	}
	return nil
}

func printLifeDeadLetters(w io.Writer, life ops.EventLife) error {
	if len(life.DeadLetters) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "DEAD LETTER", "CONSUMER", "SEQ", "RESOLVED")
	for _, d := range life.DeadLetters {
		resolved := "no"
		if d.ResolvedAt != nil {
			resolved = fmtTime(*d.ResolvedAt) + " (" + d.Resolution + ")"
		}
		t.row(fmt.Sprint(d.ID), d.Consumer, seqCell(d.StreamSeq), resolved)
	}
	return t.flush()
}

func printLifeConflicts(w io.Writer, life ops.EventLife) error {
	if len(life.Conflicts) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "CONFLICT", "DETECTED BY", "REJECTED SEQ", "DETECTED AT", "RESOLVED")
	for _, x := range life.Conflicts {
		resolved := "no"
		if x.ResolvedAt != nil {
			resolved = fmtTime(*x.ResolvedAt) + " (" + x.Resolution + ")"
		}
		t.row(fmt.Sprint(x.ID), x.DetectedBy, seqCell(x.RejectedSeq), fmtTime(x.DetectedAt), resolved)
	}
	return t.flush()
}

func printLifeOutbox(w io.Writer, life ops.EventLife) error {
	if len(life.Outbox) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "OUTBOX ID", "EVENT ID", "SUBJECT", "STATE", "EVENTS SEQ")
	for _, r := range life.Outbox {
		t.row(fmt.Sprint(r.ID), r.EventID, r.Subject, r.State, seqCell(r.SentSeq))
	}
	return t.flush()
}

func printLifeDeliveries(w io.Writer, life ops.EventLife) error {
	for _, h := range life.Deliveries {
		if err := printDeliveryHistory(w, h); err != nil {
			return err
		}
	}
	return nil
}

// consumersCmd pauses and resumes consumers, and deletes orphaned
// durables.
type consumersCmd struct {
	Pause  consumersPauseCmd  `cmd:"" help:"Pause a consumer's deliveries (JetStream consumer pause, nats-server 2.11+); messages wait in HOOKS."`
	Resume consumersResumeCmd `cmd:"" help:"Resume a paused consumer."`
	Delete consumersDeleteCmd `cmd:"" help:"Delete a durable on HOOKS that no configured consumer owns (status marks it orphaned); it keeps every message it has not acked in HOOKS."`
}

// consumersDeleteCmd deletes one orphaned durable.
type consumersDeleteCmd struct {
	Name string `arg:"" help:"Durable name, or a consumer's name for its own and its partition durables (status lists orphaned ones); a configured consumer's are refused."`
	JSON bool   `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements `consumers delete`.
func (c *consumersDeleteCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		res, err := o.DeleteDurable(ctx, c.Name)
		if err != nil {
			return fmt.Errorf("consumers delete: %w", err)
		}
		if c.JSON {
			return writeJSON(rt.stdout, res)
		}
		fmt.Fprintf(rt.stdout, "deleted %s from HOOKS (acked up to seq %d; %d messages not received, %d not acked)\n",
			strings.Join(res.Deleted, ", "), res.AckFloorSeq, res.Pending, res.AckPending)
		return nil
	})
}

// consumersPauseCmd pauses one consumer.
type consumersPauseCmd struct {
	Name string        `arg:"" help:"Consumer name."`
	For  time.Duration `help:"Pause for this long (default: until resumed)."`
	natsFlags
	allFlags
}

// Run implements `consumers pause`.
func (c *consumersPauseCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		var until time.Time
		if c.For > 0 {
			until = time.Now().Add(c.For)
		}
		res, err := o.Pause(ctx, c.Name, until)
		if err != nil {
			return fmt.Errorf("consumers pause: %w", err)
		}
		if res.Until == nil {
			return fmt.Errorf("consumers pause: the server answered that %s is not paused", res.Name)
		}
		fmt.Fprintf(rt.stdout, "consumer %s paused until %s\n", res.Name, fmtTime(*res.Until))
		return nil
	})
}

// consumersResumeCmd resumes one consumer.
type consumersResumeCmd struct {
	Name string `arg:"" help:"Consumer name."`
	natsFlags
	allFlags
}

// Run implements `consumers resume`.
func (c *consumersResumeCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		res, err := o.Resume(ctx, c.Name)
		if err != nil {
			return fmt.Errorf("consumers resume: %w", err)
		}
		fmt.Fprintf(rt.stdout, "consumer %s running (paused: %v)\n", res.Name, res.Paused)
		return nil
	})
}

// printStatusLine prints the answer of an idempotent action.
func printStatusLine(rt *runtime, asJSON bool, what string, id int64, status string) error {
	if asJSON {
		return writeJSON(rt.stdout, map[string]any{"id": id, "status": status})
	}
	fmt.Fprintf(rt.stdout, "%s %d: %s\n", what, id, status)
	return nil
}
