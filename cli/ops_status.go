package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/app"
)

// StatusCmd prints how far behind everything is.
type StatusCmd struct {
	JSON bool `help:"Print JSON."`
	natsFlags
	allFlags
}

// Run implements the status command. Without a way to reach JetStream it
// still prints the Postgres part, then fails with the reason.
func (c *StatusCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
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
		t := newTable(w, "STREAM", "MESSAGES", "BYTES", "LIMIT", "FIRST SEQ", "LAST SEQ", "FIRST (REPLAY REACHES BACK TO)", "LAST", "MAX AGE")
		for _, s := range st.Streams {
			limit := "none"
			if s.MaxBytes > 0 {
				limit = fmt.Sprintf("%d (%.0f%%)", s.MaxBytes, 100*float64(s.Bytes)/float64(s.MaxBytes))
			}
			first := fmtTime(s.FirstTime)
			if !s.FirstTime.IsZero() {
				first += " (" + time.Since(s.FirstTime).Round(time.Second).String() + " ago)"
			}
			t.row(s.Name, fmt.Sprint(s.Messages), fmt.Sprint(s.Bytes), limit, fmt.Sprint(s.FirstSeq), fmt.Sprint(s.LastSeq),
				first, fmtTime(s.LastTime), time.Duration(s.MaxAgeSeconds*float64(time.Second)).String())
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
		t = newTable(w, "STREAM", "CONSUMER", "PENDING", "ACK PENDING", "REDELIVERED", "ACK FLOOR", "OLDEST UNACKED", "DEAD LETTERS")
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
				fmt.Sprint(c.AckFloor), oldest, fmt.Sprint(st.DeadLetters[c.Name]))
		}
		if err := t.flush(); err != nil {
			return err
		}
		for _, name := range st.OrphanedDurables {
			fmt.Fprintf(w, "ORPHANED: durable %s on HOOKS belongs to no configured consumer; HOOKS keeps every message it has not acked. "+
				"Remove it with `hookbridge consumers delete %s`\n", name, name)
		}
		fmt.Fprintln(w)
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
