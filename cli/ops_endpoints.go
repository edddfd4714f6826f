package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/internal/ops"
)

// endpointsCmd shows and acts on the delivery endpoints
// (docs/DELIVERY.md, "Operations").
type endpointsCmd struct {
	List        endpointsListCmd        `cmd:"" help:"List the delivery endpoints: state, owner, backlog, dead letters."`
	Show        endpointsShowCmd        `cmd:"" help:"Show one endpoint: its state, backlog, latest attempts and unresolved dead letters."`
	Test        endpointsTestCmd        `cmd:"" help:"Post one signed hookbridge.test event to an endpoint and print its answer (nothing is recorded or retried)."`
	Disable     endpointsDisableCmd     `cmd:"" help:"Disable an endpoint: nothing is sent to it, its events wait (nothing is lost)."`
	Enable      endpointsEnableCmd      `cmd:"" help:"Enable an endpoint again: it resumes where it stopped."`
	Replay      endpointsReplayCmd      `cmd:"" help:"Send events of EVENTS to one endpoint again (same webhook-id), by sequence range, time, subject or event id."`
	DeadLetters endpointsDeadLettersCmd `cmd:"" name:"dead-letters" help:"List, requeue or discard deliveries that failed an endpoint's whole retry schedule."`
}

// endpointsListCmd lists the endpoints.
type endpointsListCmd struct {
	JSON bool `help:"Print JSON (the admin API's GET /api/v1/endpoints)."`
	natsFlags
	allFlags
}

// Run implements `endpoints list`.
func (c *endpointsListCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		list, err := o.EndpointList(ctx)
		if err != nil {
			return fmt.Errorf("endpoints list: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, list)
		}
		if err := printEndpoints(rt.stdout, list); err != nil {
			return err
		}
		if o.EndpointsErr != nil {
			return fmt.Errorf("endpoints list: some endpoints not shown: %w", o.EndpointsErr)
		}
		return nil
	})
}

// printEndpoints prints the endpoints' table, as status does.
func printEndpoints(w io.Writer, list []ops.EndpointStatus) error {
	t := newTable(w, "ENDPOINT", "STATE", "OWNER", "BACKLOG", "PENDING", "ACK PENDING", "IN POSTGRES", "FAILING", "DEAD LETTERS", "URL")
	for _, e := range list {
		state := e.State
		if e.DisabledReason != "" {
			state += " (" + e.DisabledReason + ")"
		}
		if e.FailingSince != nil {
			state += " since " + fmtTime(*e.FailingSince)
		}
		owner := e.Owner
		if owner == "" {
			owner = "-"
		}
		t.row(e.Name, state, owner, fmt.Sprint(e.Backlog), fmt.Sprint(e.Pending), fmt.Sprint(e.AckPending), fmt.Sprint(e.Tracked),
			fmt.Sprint(e.Failing), fmt.Sprint(e.DeadLetters), e.URL)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, e := range list {
		if e.InfoErr != "" {
			fmt.Fprintf(w, "%s: its durable could not be read: %s\n", e.Name, e.InfoErr)
		}
	}
	return nil
}

// endpointsShowCmd shows one endpoint.
type endpointsShowCmd struct {
	Name string `arg:"" help:"Endpoint name (as configured)."`
	JSON bool   `help:"Print JSON (the admin API's GET /api/v1/endpoints/{name})."`
	natsFlags
	allFlags
}

// Run implements `endpoints show`.
func (c *endpointsShowCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		v, err := o.Endpoint(ctx, c.Name)
		if err != nil {
			return fmt.Errorf("endpoints show: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, v)
		}
		return printEndpointView(rt.stdout, v)
	})
}

func printEndpointView(w io.Writer, v ops.EndpointView) error {
	if err := printEndpoints(w, []ops.EndpointStatus{v.EndpointStatus}); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nsubjects %s, ordered %t, concurrency %d", strings.Join(v.Subjects, " "), v.Ordered, v.Concurrency)
	if v.Rate > 0 {
		fmt.Fprintf(w, ", rate %g/s", v.Rate)
	}
	fmt.Fprintln(w)
	if len(v.RecentAttempts) > 0 {
		fmt.Fprintf(w, "\nLATEST ATTEMPTS (newest first, at most %d)\n", ops.RecentAttemptsShown)
		if err := printAttempts(w, v.RecentAttempts, true); err != nil {
			return err
		}
	}
	if len(v.DeadLetterList) > 0 {
		fmt.Fprintln(w, "\nDEAD LETTERS (requeue with `hookbridge endpoints dead-letters requeue ID...`)")
		if err := printDeliveryDeadLetters(w, v.DeadLetterList); err != nil {
			return err
		}
	}
	return nil
}

// printAttempts prints delivery attempts: status, class, latency, time.
func printAttempts(w io.Writer, list []ops.EndpointAttempt, withEvent bool) error {
	header := []string{"ATTEMPT", "STATUS", "CLASS", "LATENCY", "AT", "SEQ", "EXCERPT"}
	if withEvent {
		header = append([]string{"EVENT ID"}, header...)
	}
	t := newTable(w, header...)
	for _, a := range list {
		status := "-"
		if a.StatusCode != 0 {
			status = fmt.Sprint(a.StatusCode)
		}
		cells := []string{fmt.Sprint(a.Attempt), status, ops.AttemptClass(a), a.Duration.String(), fmtTime(a.AttemptedAt),
			seqCell(a.StreamSeq), clip(oneLine(a.Excerpt), 60)}
		if withEvent {
			cells = append([]string{a.EventID}, cells...)
		}
		t.row(cells...)
	}
	return t.flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func printDeliveryDeadLetters(w io.Writer, list []ops.EndpointDeadLetter) error {
	t := newTable(w, "ID", "ENDPOINT", "EVENT ID", "SUBJECT", "SEQ", "ATTEMPTS", "LAST STATUS", "CREATED", "RESOLVED", "PASSED")
	for _, d := range list {
		last := d.LastErrorClass
		if d.LastStatus != 0 {
			last = fmt.Sprint(d.LastStatus)
		}
		resolved := "no"
		if d.ResolvedAt != nil {
			resolved = fmtTime(*d.ResolvedAt) + " (" + d.Resolution + ")"
		}
		t.row(fmt.Sprint(d.ID), d.Endpoint, d.EventID, d.Subject, seqCell(d.StreamSeq), fmt.Sprint(d.Attempts), last,
			fmtTime(d.CreatedAt), resolved, fmtTimePtr(d.PassedAt))
	}
	return t.flush()
}

// endpointsTestCmd posts a test event.
type endpointsTestCmd struct {
	Name string `arg:"" help:"Endpoint name (as configured)."`
	JSON bool   `help:"Print JSON."`
	dbFlags
}

// Run implements `endpoints test`: it fails when the endpoint does not
// answer 2xx in time.
func (c *endpointsTestCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		res, err := o.EndpointTest(ctx, c.Name)
		if err != nil {
			return fmt.Errorf("endpoints test: %w", err)
		}
		if c.JSON {
			if err := writeJSON(rt.stdout, res); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(rt.stdout, "%s: test event %s: status %d, class %s, latency %s\n", c.Name, res.EventID, res.Status, res.Class,
				res.Latency.Round(time.Millisecond))
			if res.Excerpt != "" {
				fmt.Fprintf(rt.stdout, "answer: %s\n", clip(oneLine(res.Excerpt), 200))
			}
		}
		if !res.Success {
			return fmt.Errorf("endpoints test: %s did not accept the test event (%s)", c.Name, res.Class)
		}
		return nil
	})
}

// endpointsDisableCmd disables an endpoint.
type endpointsDisableCmd struct {
	Name   string `arg:"" help:"Endpoint name (as configured)."`
	Reason string `help:"Why (shown by status and the console; default manual)."`
	JSON   bool   `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements `endpoints disable`.
func (c *endpointsDisableCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		res, err := o.EndpointDisable(ctx, c.Name, c.Reason)
		if err != nil {
			return fmt.Errorf("endpoints disable: %w", dbError(err))
		}
		return printEndpointChange(rt, c.JSON, res)
	})
}

// endpointsEnableCmd enables an endpoint.
type endpointsEnableCmd struct {
	Name string `arg:"" help:"Endpoint name (as configured)."`
	JSON bool   `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements `endpoints enable`.
func (c *endpointsEnableCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		res, err := o.EndpointEnable(ctx, c.Name)
		if err != nil {
			return fmt.Errorf("endpoints enable: %w", dbError(err))
		}
		return printEndpointChange(rt, c.JSON, res)
	})
}

func printEndpointChange(rt *runtime, asJSON bool, res ops.EndpointChange) error {
	if asJSON {
		return writeJSON(rt.stdout, res)
	}
	if res.Changed {
		fmt.Fprintf(rt.stdout, "endpoint %s %s\n", res.Endpoint, res.State)
	} else {
		fmt.Fprintf(rt.stdout, "endpoint %s was %s already; nothing changed\n", res.Endpoint, res.State)
	}
	return nil
}

// endpointsReplayCmd replays events to one endpoint.
type endpointsReplayCmd struct {
	Name    string   `arg:"" help:"Endpoint name (as configured)."`
	FromSeq uint64   `name:"from-seq" help:"First EVENTS sequence."`
	ToSeq   uint64   `name:"to-seq" help:"Last EVENTS sequence (inclusive)."`
	Since   string   `help:"Events stored at or after this time: RFC 3339, or a duration meaning that long ago (2h)."`
	Until   string   `help:"Events stored before this time: RFC 3339 or a duration ago."`
	Subject string   `help:"An EVENTS subject or filter (events.orders.>); only events the endpoint receives are sent."`
	ID      []string `name:"id" help:"An event's webhook-id (repeat or comma-separate for several)."`
	Limit   int      `help:"At most this many events (0: the most a replay queues)."`
	DryRun  bool     `name:"dry-run" help:"Count what would be sent; send nothing."`
	JSON    bool     `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements `endpoints replay`.
func (c *endpointsReplayCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	now := time.Now()
	since, err := ops.ParseWhen(c.Since, now)
	if err != nil {
		return fmt.Errorf("endpoints replay: --since: %w", err)
	}
	until, err := ops.ParseWhen(c.Until, now)
	if err != nil {
		return fmt.Errorf("endpoints replay: --until: %w", err)
	}
	sel := ops.EndpointReplaySelector{FromSeq: c.FromSeq, ToSeq: c.ToSeq, Since: since, Until: until, Subject: c.Subject,
		EventIDs: c.ID, Limit: c.Limit}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		res, err := o.EndpointReplay(ctx, c.Name, sel, c.DryRun)
		if err != nil {
			// A replay can fail after it queued some: say how many.
			switch {
			case res.Queued > 0 && c.JSON:
				_ = writeJSON(rt.stdout, res)
			case res.Queued > 0:
				fmt.Fprintf(rt.stdout, "%s: %d event(s) matched, queued %d before the error\n", c.Name, res.Matched, res.Queued)
			}
			return fmt.Errorf("endpoints replay: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, res)
		}
		verb := "queued"
		if res.DryRun {
			verb, res.Queued = "would queue", res.Matched-res.AlreadyPending
		}
		fmt.Fprintf(rt.stdout, "%s: %d event(s) matched, %s %d, %d already pending\n", c.Name, res.Matched, verb, res.Queued, res.AlreadyPending)
		if res.Truncated {
			fmt.Fprintln(rt.stdout, "more events matched than the limit; replay the rest with a later --from-seq")
		}
		return nil
	})
}

// endpointsDeadLettersCmd triages the delivery dead letters.
type endpointsDeadLettersCmd struct {
	List    endpointsDeadLettersListCmd    `cmd:"" help:"List delivery dead letters (unresolved ones unless --all)."`
	Requeue endpointsDeadLettersRequeueCmd `cmd:"" help:"Send dead letters again (same webhook-id, a fresh schedule), one or many."`
	Discard endpointsDeadLettersDiscardCmd `cmd:"" help:"Resolve dead letters without sending them, one or many."`
}

// deadLetterSelect selects delivery dead letters on the command line.
type deadLetterSelect struct {
	IDs      []int64 `arg:"" optional:"" name:"id" help:"Dead letter ids (from list)."`
	Endpoint string  `help:"Those of this endpoint."`
	Event    string  `help:"Those of this event (webhook-id)."`
	Subject  string  `help:"Those of this subject."`
	Since    string  `help:"Those written at or after this time: RFC 3339, or a duration meaning that long ago (2h)."`
	Until    string  `help:"Those written before this time: RFC 3339 or a duration ago."`
}

func (s deadLetterSelect) filter() (ops.EndpointDeadLetterFilter, error) {
	now := time.Now()
	since, err := ops.ParseWhen(s.Since, now)
	if err != nil {
		return ops.EndpointDeadLetterFilter{}, fmt.Errorf("--since: %w", err)
	}
	until, err := ops.ParseWhen(s.Until, now)
	if err != nil {
		return ops.EndpointDeadLetterFilter{}, fmt.Errorf("--until: %w", err)
	}
	return ops.EndpointDeadLetterFilter{IDs: s.IDs, Endpoint: s.Endpoint, EventID: s.Event, Subject: s.Subject, Since: since, Until: until}, nil
}

// endpointsDeadLettersListCmd lists delivery dead letters.
type endpointsDeadLettersListCmd struct {
	deadLetterSelect
	All   bool `help:"Include requeued and discarded ones."`
	Limit int  `help:"At most this many." default:"100"`
	JSON  bool `help:"Print JSON (the admin API's GET /api/v1/delivery-dead-letters)."`
	dbFlags
}

// Run implements `endpoints dead-letters list`.
func (c *endpointsDeadLettersListCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	f, err := c.filter()
	if err != nil {
		return fmt.Errorf("endpoints dead-letters list: %w", err)
	}
	f.Resolved, f.Limit = c.All, c.Limit
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		list, err := o.EndpointDeadLetters(ctx, f)
		if err != nil {
			return fmt.Errorf("endpoints dead-letters list: %w", dbError(err))
		}
		if c.JSON {
			return writeJSON(rt.stdout, list)
		}
		return printDeliveryDeadLetters(rt.stdout, list)
	})
}

// endpointsDeadLettersRequeueCmd requeues delivery dead letters.
type endpointsDeadLettersRequeueCmd struct {
	deadLetterSelect
	OutOfOrder bool `name:"out-of-order" help:"On an ordered endpoint, also requeue those a later event of their key has passed (they arrive after it)."`
	DryRun     bool `name:"dry-run" help:"Count what would be requeued; change nothing."`
	JSON       bool `help:"Print JSON."`
	dbFlags
}

// Run implements `endpoints dead-letters requeue`.
func (c *endpointsDeadLettersRequeueCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	f, err := c.filter()
	if err != nil {
		return fmt.Errorf("endpoints dead-letters requeue: %w", err)
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		res, err := o.EndpointDeadLettersRequeue(ctx, f, c.OutOfOrder, c.DryRun)
		if err != nil {
			// A requeue can fail after it requeued some: say which.
			if len(res.Done) > 0 {
				_ = printTriage(rt, c.JSON, "requeued", res)
			}
			return fmt.Errorf("endpoints dead-letters requeue: %w", dbError(err))
		}
		return printTriage(rt, c.JSON, "requeued", res)
	})
}

// endpointsDeadLettersDiscardCmd discards delivery dead letters.
type endpointsDeadLettersDiscardCmd struct {
	deadLetterSelect
	DryRun bool `name:"dry-run" help:"Count what would be discarded; change nothing."`
	JSON   bool `help:"Print JSON."`
	dbFlags
}

// Run implements `endpoints dead-letters discard`.
func (c *endpointsDeadLettersDiscardCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	f, err := c.filter()
	if err != nil {
		return fmt.Errorf("endpoints dead-letters discard: %w", err)
	}
	return withOps(ctx, cfg, rt, natsFlags{}, false, func(o *ops.Ops) error {
		res, err := o.EndpointDeadLettersDiscard(ctx, f, c.DryRun)
		if err != nil {
			return fmt.Errorf("endpoints dead-letters discard: %w", dbError(err))
		}
		return printTriage(rt, c.JSON, "discarded", res)
	})
}

func printTriage(rt *runtime, asJSON bool, verb string, res ops.EndpointTriageResult) error {
	if asJSON {
		return writeJSON(rt.stdout, res)
	}
	if res.DryRun {
		verb = "would be " + verb
	}
	fmt.Fprintf(rt.stdout, "%d dead letter(s) matched, %d %s %v\n", res.Matched, len(res.Done), verb, res.Done)
	if len(res.Refused) > 0 {
		fmt.Fprintf(rt.stdout, "%d refused %v: a later event of their key has reached the endpoint; requeue them with --out-of-order to send them after it\n",
			len(res.Refused), res.Refused)
	}
	if len(res.NotConfigured) > 0 {
		fmt.Fprintf(rt.stdout, "%d not requeued %v: their endpoint is no longer configured, so nothing would send them; discard them\n",
			len(res.NotConfigured), res.NotConfigured)
	}
	if len(res.Raced) > 0 {
		fmt.Fprintf(rt.stdout, "%d resolved meanwhile by another action %v\n", len(res.Raced), res.Raced)
	}
	return nil
}

// printDeliveryHistory prints an event's delivery history per endpoint.
func printDeliveryHistory(w io.Writer, h ops.DeliveryHistory) error {
	for _, e := range h.Endpoints {
		fmt.Fprintf(w, "\nDELIVERY of %s to %s: %s\n", h.EventID, e.Endpoint, e.State)
		if len(e.Attempts) > 0 {
			if err := printAttempts(w, e.Attempts, false); err != nil {
				return err
			}
		}
		if p := e.Pending; p != nil {
			next := "behind an earlier event of its key"
			if p.NextAttemptAt != nil {
				next = "next attempt " + fmtTime(*p.NextAttemptAt)
			}
			fmt.Fprintf(w, "pending (%s): %d failed attempt(s), %s\n", p.Origin, p.Attempts, next)
		}
		if len(e.DeadLetters) > 0 {
			if err := printDeliveryDeadLetters(w, e.DeadLetters); err != nil {
				return err
			}
		}
	}
	return nil
}
