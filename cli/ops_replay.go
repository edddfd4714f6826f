package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// replayCmd re-delivers stored webhooks to one consumer.
type replayCmd struct {
	Consumer    string `help:"Consumer to replay to (its name in the configuration)." required:""`
	FromSeq     uint64 `name:"from-seq" help:"First HOOKS stream sequence."`
	ToSeq       uint64 `name:"to-seq" help:"Last HOOKS stream sequence."`
	Since       string `help:"Stream time to start at: RFC 3339, or a duration meaning that long ago (2h)."`
	Until       string `help:"Stream time to stop before: RFC 3339 or a duration ago."`
	Type        string `help:"Only this event type."`
	EventID     string `name:"event-id" help:"Only this event id."`
	DeadLetters bool   `name:"dead-letters" help:"Replay the consumer's unresolved dead letters (narrowed by the other selectors)."`
	OutOfOrder  bool   `name:"out-of-order" help:"With --dead-letters: also apply the dead letters a later event of their ordering key has passed (left alone, counted and listed by default); each applies after that event."`
	DryRun      bool   `name:"dry-run" help:"Report per message what would happen (new, duplicate, conflict) without applying."`
	JSON        bool   `help:"Print one JSON object per line: each message as it is handled (all of a dry run, else those that did not apply), then {\"summary\": ...}."`
	natsFlags
	allFlags
}

// progressEvery is how often a running replay reports its progress on
// stderr; a replay that ends sooner prints none.
const progressEvery = 2 * time.Second

// Run implements the replay command.
func (c *replayCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	sel, err := c.selectors(time.Now())
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return withOps(ctx, cfg, rt, c.natsFlags, true, func(o *ops.Ops) error {
		o.Logger = app.NewLogger(cfg, io.Discard) // the summary is the output
		plan, err := o.PlanReplay(c.Consumer, sel)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		out := newReplayPrinter(rt.stdout, c.JSON)
		prog := startProgress(rt.stderr)
		defer prog.stop()
		res, err := o.RunReplay(ctx, plan, ops.ReplayHooks{
			Planned: prog.planned,
			Report: func(it ops.ReplayItem) {
				prog.add()
				if c.DryRun || !ops.Applied(it.Outcome) {
					out.item(it)
				}
			},
		})
		prog.stop()
		if err != nil {
			return dbError(err)
		}
		if err := out.summary(res, c.DeadLetters && !c.OutOfOrder); err != nil {
			return err
		}
		if res.Failed > 0 {
			return fmt.Errorf("replay: %d event(s) failed; see the list above", res.Failed)
		}
		return nil
	})
}

// selectors reads the flags.
func (c *replayCmd) selectors(now time.Time) (ops.ReplaySelectors, error) {
	since, err := ops.ParseWhen(c.Since, now)
	if err != nil {
		return ops.ReplaySelectors{}, fmt.Errorf("--since: %w", err)
	}
	until, err := ops.ParseWhen(c.Until, now)
	if err != nil {
		return ops.ReplaySelectors{}, fmt.Errorf("--until: %w", err)
	}
	return ops.ReplaySelectors{FromSeq: c.FromSeq, ToSeq: c.ToSeq, Since: since, Until: until, Type: c.Type,
		EventID: c.EventID, DeadLetters: c.DeadLetters, DryRun: c.DryRun, OutOfOrder: c.OutOfOrder}, nil
}

// replayPrinter prints a replay's items as they come, so a replay of
// millions of messages holds none of them: JSON lines (each an
// [ops.ReplayItem], as the admin API's dry run lists them), or text rows.
// Identifiers are printed whole, so that they can be pasted into `events
// show` or `--event-id`; a long one only shifts its row.
type replayPrinter struct {
	w      io.Writer
	json   bool
	enc    *json.Encoder
	header bool
	rows   int
}

func newReplayPrinter(w io.Writer, asJSON bool) *replayPrinter {
	return &replayPrinter{w: w, json: asJSON, enc: json.NewEncoder(w)}
}

const replayRow = "%-10s %-20s %-12s %-24s %-20s %-10s %s\n"

func (p *replayPrinter) item(it ops.ReplayItem) {
	if p.json {
		_ = p.enc.Encode(it) // a closed stdout shows in the summary's write
		return
	}
	if !p.header {
		fmt.Fprintf(p.w, replayRow, "SEQ", "TIME", "SOURCE", "EVENT ID", "TYPE", "OUTCOME", "ERROR")
		p.header = true
	}
	p.rows++
	last := clip(it.Error, 80)
	if it.DryRunNote != nil {
		last = it.Note
	}
	fmt.Fprintf(p.w, replayRow, fmt.Sprint(it.StreamSeq), fmtTime(it.Time), it.Source, it.EventID, it.EventType, it.Outcome, last)
}

// skippedLine is one dead letter a replay left alone, in --json.
type skippedLine struct {
	Skipped ops.SkippedDeadLetter `json:"skipped_passed"`
}

// summary prints what the replay did: with --json, a line per dead letter
// it left alone and then {"summary": ...}, the summary the admin API
// answers with. skipsPassed says whether the real run leaves the passed
// dead letters alone (a --dead-letters run without --out-of-order).
func (p *replayPrinter) summary(res ops.ReplayResult, skipsPassed bool) error {
	s := res.ReplaySummary
	if p.json {
		for _, d := range res.SkippedPassed {
			_ = p.enc.Encode(skippedLine{d}) // a closed stdout shows in the summary's write
		}
		if err := p.enc.Encode(map[string]ops.ReplayResult{"summary": res}); err != nil {
			return fmt.Errorf("write summary: %w", err)
		}
		return nil
	}
	if p.rows > 0 {
		fmt.Fprintln(p.w)
	}
	if err := p.skipped(res.SkippedPassed); err != nil {
		return err
	}
	mode := "replayed"
	if s.DryRun {
		mode = "dry run"
	}
	fmt.Fprintf(p.w, "%s to %s: %d selected\n", mode, s.Consumer, s.Selected)
	t := newTable(p.w, "OUTCOME", "COUNT")
	for _, row := range summaryRows(s) {
		t.row(row.name, fmt.Sprint(row.n))
	}
	if len(res.SkippedPassed) > 0 {
		t.row("skipped: passed", fmt.Sprint(len(res.SkippedPassed)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if res.NewDeadLetters > 0 {
		fmt.Fprintf(p.w, "%d of the new are dead letters: the real run applies them again, and each fails again unless its cause was fixed (dead-letters show ID)\n", res.NewDeadLetters)
	}
	switch {
	case res.PassedDeadLetters > 0 && skipsPassed:
		fmt.Fprintf(p.w, "%d of the new are dead letters a later event of their ordering key has passed: the real run leaves them alone (--out-of-order applies them after those events)\n", res.PassedDeadLetters)
	case res.PassedDeadLetters > 0:
		fmt.Fprintf(p.w, "%d of the new are dead letters a later event of their ordering key has passed: the real run applies them after those events, out of order\n", res.PassedDeadLetters)
	}
	return nil
}

// skipped lists the dead letters a replay left alone because a later
// event of their ordering key had passed them, and how to apply them.
func (p *replayPrinter) skipped(ds []ops.SkippedDeadLetter) error {
	if len(ds) == 0 {
		return nil
	}
	fmt.Fprintf(p.w, "SKIPPED: %d dead letter(s) a later event of their ordering key has passed; applying one now applies it after that event. "+
		"Apply them with --out-of-order, or one with `dead-letters requeue ID --out-of-order`, or discard them\n", len(ds))
	t := newTable(p.w, "DEAD LETTER", "SEQ", "SOURCE", "EVENT ID", "TYPE", "PASSED BY", "PASSED BY SEQ", "PASSED AT")
	for _, d := range ds {
		t.row(fmt.Sprint(d.ID), fmt.Sprint(d.StreamSeq), d.Source, d.EventID, d.EventType, d.PassedBy.EventID,
			fmt.Sprint(d.PassedBy.StreamSeq), fmtTime(d.PassedBy.At))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(p.w)
	return nil
}

type summaryRow struct {
	name string
	n    int
}

// summaryRows are the counts a summary prints: a dry run applies nothing,
// so it shows what would happen (new, duplicate, conflict) and never
// "processed"; a real run shows processed and duplicate always, the
// others when they happened.
func summaryRows(s engine.ReplaySummary) []summaryRow {
	all := []summaryRow{{"new", s.New}, {"processed", s.Processed}, {"duplicate", s.Duplicate}, {"conflict", s.Conflict},
		{"failed", s.Failed}, {"held", s.Held}, {"missing", s.Missing}, {"mismatch", s.Mismatch}, {"unusable", s.Unusable},
		{"dead letters resolved", s.Resolved}}
	var out []summaryRow
	for _, row := range all {
		always := row.name == "duplicate" || (s.DryRun && (row.name == "new" || row.name == "conflict")) || (!s.DryRun && row.name == "processed")
		if row.n > 0 || always {
			out = append(out, row)
		}
	}
	return out
}

// progress reports a long replay's progress on stderr every
// progressEvery until stopped.
type progress struct {
	w     io.Writer
	mu    sync.Mutex
	total uint64
	done  uint64
	stopc chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func startProgress(w io.Writer) *progress {
	p := &progress{w: w, stopc: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stopc:
				return
			case <-t.C:
				p.mu.Lock()
				done, total := p.done, p.total
				p.mu.Unlock()
				if total > 0 {
					fmt.Fprintf(p.w, "replay: %d of at most %d messages (%.0f%%)\n", done, total, 100*float64(done)/float64(total))
				} else {
					fmt.Fprintf(p.w, "replay: %d messages\n", done)
				}
			}
		}
	}()
	return p
}

func (p *progress) planned(n uint64) {
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}

func (p *progress) add() {
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
}

func (p *progress) stop() {
	p.once.Do(func() { close(p.stopc) })
	p.wg.Wait()
}
