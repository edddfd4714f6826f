package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/app"
)

// statusCmd prints how far behind everything is.
type statusCmd struct {
	JSON bool `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements the status command. Without a way to reach JetStream it
// still prints the Postgres part, then fails with the reason.
func (c *statusCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	return withConfigPool(ctx, g, rt, func(cfg app.Config, pool *pgxpool.Pool) error {
		st := app.NewStatus()
		if err := st.ReadPostgres(ctx, pool); err != nil {
			return fmt.Errorf("status: %w", dbError(err))
		}
		js, closeNATS, jsErr := opsJetStream(ctx, cfg, c.natsFlags)
		if jsErr == nil {
			jsErr = st.ReadJetStream(ctx, js)
			closeNATS()
			st.ApplyConfig(cfg)
		}
		if jsErr != nil {
			st.JetStreamError = jsErr.Error()
		}
		var err error
		if c.JSON {
			err = writeJSON(rt.stdout, st)
		} else {
			err = printStatus(rt.stdout, &st)
		}
		if err != nil {
			return err
		}
		if jsErr != nil {
			return fmt.Errorf("status: streams and consumers not shown: %w", jsErr)
		}
		return nil
	})
}

func printStatus(w io.Writer, st *app.Status) error {
	if st.JetStreamError == "" {
		if err := printStreams(w, st); err != nil {
			return err
		}
		if err := printConsumers(w, st); err != nil {
			return err
		}
		if err := printKeyed(w, st); err != nil {
			return err
		}
	}
	if err := printRetrying(w, st); err != nil {
		return err
	}
	t := newTable(w, "POSTGRES", "COUNT")
	t.row("outbox pending", fmt.Sprint(st.Outbox.Pending))
	t.row("outbox oldest pending", time.Duration(st.Outbox.OldestPendingSecond*float64(time.Second)).Round(time.Millisecond).String())
	t.row("outbox dead", fmt.Sprint(st.Outbox.Dead))
	var dead int64
	for _, n := range st.DeadLetters {
		dead += n
	}
	t.row("dead letters unresolved", fmt.Sprint(dead))
	t.row("conflicts", fmt.Sprint(st.Conflicts))
	return t.flush()
}

// replayReach is how far back a replay of a stream reaches, written the
// way status and the console both show it: the oldest message still
// stored, by sequence and time (a stream's max age is only the limit
// that trims it; the storage guard and max_bytes trim it too).
func replayReach(s app.StreamStatus, now time.Time) string {
	if s.Messages == 0 || s.FirstTime.IsZero() {
		return "nothing stored"
	}
	return fmt.Sprintf("seq %d, %s (%s ago)", s.FirstSeq, fmtTime(s.FirstTime), now.Sub(s.FirstTime).Round(time.Second))
}

func printStreams(w io.Writer, st *app.Status) error {
	now := time.Now()
	t := newTable(w, "STREAM", "MESSAGES", "BYTES", "LIMIT", "LAST SEQ", "LAST", "REPLAY REACHES BACK TO", "MAX AGE")
	for _, s := range st.Streams {
		limit := "none"
		if s.MaxBytes > 0 {
			limit = fmt.Sprintf("%d (%.0f%%)", s.MaxBytes, 100*float64(s.Bytes)/float64(s.MaxBytes))
		}
		t.row(s.Name, fmt.Sprint(s.Messages), fmt.Sprint(s.Bytes), limit, fmt.Sprint(s.LastSeq), fmtTime(s.LastTime),
			replayReach(s, now), time.Duration(s.MaxAgeSeconds*float64(time.Second)).String())
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, s := range st.Streams {
		if s.Full != "" {
			fmt.Fprintf(w, "%s REFUSES NEW MESSAGES: %s\n", s.Name, s.Full)
		}
		if s.LowestAckFloor != nil {
			fmt.Fprintf(w, "%s: no consumer needs a message up to seq %d (each acked it or will never receive it); "+
				"serve trims below it what is older than the max age, or sooner when space runs short; replays then reach back to seq %d\n",
				s.Name, *s.LowestAckFloor, max(*s.LowestAckFloor+1, s.FirstSeq))
		}
	}
	fmt.Fprintln(w)
	return nil
}

func printConsumers(w io.Writer, st *app.Status) error {
	t := newTable(w, "STREAM", "CONSUMER", "PENDING", "ACK PENDING", "REDELIVERED", "RETRYING", "ACK FLOOR", "OLDEST UNACKED", "DEAD LETTERS")
	for _, c := range st.Consumers {
		oldest := "-"
		if c.OldestUnackedSeconds > 0 {
			oldest = time.Duration(c.OldestUnackedSeconds * float64(time.Second)).Round(time.Second).String()
		}
		name := c.Name
		if c.Paused {
			name += " (paused)"
		}
		if c.Orphaned {
			name += " (orphaned)"
		}
		t.row(c.Stream, name, fmt.Sprint(c.NumPending), fmt.Sprint(c.NumAckPending), fmt.Sprint(c.NumRedelivered),
			fmt.Sprint(st.RetryingByConsumer[c.Name]), fmt.Sprint(c.AckFloor), oldest, fmt.Sprint(st.DeadLetters[c.Name]))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, name := range st.OrphanedDurables {
		fmt.Fprintf(w, "ORPHANED: durable %s on HOOKS belongs to no configured consumer; HOOKS keeps every message it has not acked. "+
			"Remove it with `hookbridge consumers delete %s`\n", name, name)
	}
	fmt.Fprintln(w)
	return nil
}

// printRetrying lists the events failing right now, with their failure
// counts and last errors: what REDELIVERED counts without naming.
func printRetrying(w io.Writer, st *app.Status) error {
	if len(st.Retrying) == 0 {
		return nil
	}
	var all int64
	for _, n := range st.RetryingByConsumer {
		all += n
	}
	fmt.Fprintf(w, "RETRYING: %d event(s) failing now, each redelivered after its backoff and dead-lettered at max_deliver "+
		"(POSTPONED ones wait for a later event of their key, and are dead-lettered after postpone_limit)", all)
	if all > int64(len(st.Retrying)) {
		fmt.Fprintf(w, " (the %d most recent shown)", len(st.Retrying))
	}
	fmt.Fprintln(w)
	t := newTable(w, "CONSUMER", "SOURCE", "EVENT ID", "SEQ", "FAILURES", "LAST FAILED", "LAST ERROR")
	for _, f := range st.Retrying {
		failures := fmt.Sprint(f.Failures)
		if f.PostponedSince != nil {
			failures += fmt.Sprintf(" POSTPONED %s", time.Since(*f.PostponedSince).Round(time.Second))
		}
		t.row(f.Consumer, f.Source, f.EventID, fmt.Sprint(f.StreamSeq), failures, fmtTime(f.UpdatedAt), clip(f.LastError, 100))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}
