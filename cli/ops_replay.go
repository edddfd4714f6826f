package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/consumer"
)

// ReplayCmd re-delivers stored webhooks to one consumer.
type ReplayCmd struct {
	Consumer    string `help:"Consumer to replay to (its name in the configuration)." required:""`
	FromSeq     uint64 `name:"from-seq" help:"First HOOKS stream sequence."`
	ToSeq       uint64 `name:"to-seq" help:"Last HOOKS stream sequence."`
	Since       string `help:"Stream time to start at: RFC 3339, or a duration meaning that long ago (2h)."`
	Until       string `help:"Stream time to stop before: RFC 3339 or a duration ago."`
	Type        string `help:"Only this event type."`
	EventID     string `name:"event-id" help:"Only this event id."`
	DeadLetters bool   `name:"dead-letters" help:"Replay the consumer's unresolved dead letters (narrowed by the other selectors)."`
	DryRun      bool   `name:"dry-run" help:"Report per message what would happen (new, duplicate, conflict) without applying."`
	JSON        bool   `help:"Print JSON."`
	natsFlags
}

// replayOutput is the JSON form of a replay's result.
type replayOutput struct {
	Summary consumer.ReplaySummary `json:"summary"`
	// Items lists every message of a dry run, and otherwise only those
	// that did not apply.
	Items []consumer.ReplayItem `json:"items"`
}

// Run implements the replay command.
func (c *ReplayCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	opts, err := c.options(cfg, rt.handlers, time.Now())
	if err != nil {
		return err
	}
	pool, err := opsPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	js, closeNATS, err := opsJetStream(ctx, cfg, c.natsFlags)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer closeNATS()

	out := replayOutput{Items: []consumer.ReplayItem{}}
	opts.Report = func(it consumer.ReplayItem) {
		if c.DryRun || !applied(it.Outcome) {
			out.Items = append(out.Items, it)
		}
	}
	opts.Logger = app.NewLogger(cfg, io.Discard) // the summary is the output
	out.Summary, err = consumer.Replay(ctx, pool, js, opts)
	if err != nil {
		return fmt.Errorf("replay: %w", dbError(err))
	}
	if err := c.print(rt.stdout, out); err != nil {
		return err
	}
	if out.Summary.Failed > 0 {
		return fmt.Errorf("replay: %d event(s) failed; see the list above", out.Summary.Failed)
	}
	return nil
}

// options resolves the consumer's handler and subscription from the
// configuration, as serve does, and the selectors from the flags.
func (c *ReplayCmd) options(cfg app.Config, handlers app.Handlers, now time.Time) (consumer.ReplayOptions, error) {
	cc := cfg.Consumer(c.Consumer)
	if cc == nil {
		var names []string
		for _, x := range cfg.Consumers {
			names = append(names, x.Name)
		}
		return consumer.ReplayOptions{}, fmt.Errorf("replay: consumer %q is not configured (have: %s)", c.Consumer, strings.Join(names, ", "))
	}
	since, err := parseWhen(c.Since, now)
	if err != nil {
		return consumer.ReplayOptions{}, fmt.Errorf("replay: --since: %w", err)
	}
	until, err := parseWhen(c.Until, now)
	if err != nil {
		return consumer.ReplayOptions{}, fmt.Errorf("replay: --until: %w", err)
	}
	h, err := cc.NewHandler(handlers)
	if err != nil {
		return consumer.ReplayOptions{}, fmt.Errorf("replay: %w", err)
	}
	return consumer.ReplayOptions{
		Consumer:     cc.Name,
		Handler:      h,
		Sources:      cc.Sources,
		EventTypes:   cc.Types(handlers),
		FromSeq:      c.FromSeq,
		ToSeq:        c.ToSeq,
		Since:        since,
		Until:        until,
		Type:         c.Type,
		EventID:      c.EventID,
		DeadLetters:  c.DeadLetters,
		DryRun:       c.DryRun,
		ApplyTimeout: cc.HandlerTimeout,
	}, nil
}

func applied(outcome consumer.Outcome) bool {
	return outcome == consumer.Processed || outcome == consumer.Duplicate
}

func (c *ReplayCmd) print(w io.Writer, out replayOutput) error {
	if c.JSON {
		return writeJSON(w, out)
	}
	if len(out.Items) > 0 {
		t := newTable(w, "SEQ", "TIME", "SOURCE", "EVENT ID", "TYPE", "OUTCOME", "ERROR")
		for _, it := range out.Items {
			t.row(fmt.Sprint(it.Seq), fmtTime(it.Time), it.Source, it.EventID, it.Type, it.Outcome.String(), clip(it.Error, 80))
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	s := out.Summary
	mode := "replayed"
	if s.DryRun {
		mode = "dry run"
	}
	fmt.Fprintf(w, "%s to %s: %d selected\n", mode, s.Consumer, s.Selected)
	t := newTable(w, "OUTCOME", "COUNT")
	for _, row := range []struct {
		name string
		n    int
	}{{"new", s.New}, {"processed", s.Processed}, {"duplicate", s.Duplicate}, {"conflict", s.Conflict},
		{"failed", s.Failed}, {"missing", s.Missing}, {"mismatch", s.Mismatch}, {"unusable", s.Unusable},
		{"dead letters resolved", s.Resolved}} {
		if row.n > 0 || row.name == "processed" || row.name == "duplicate" || (s.DryRun && row.name == "new") {
			t.row(row.name, fmt.Sprint(row.n))
		}
	}
	return t.flush()
}
