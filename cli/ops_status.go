package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hookbridge/hookbridge/internal/ops"
)

// statusCmd prints how far behind everything is.
type statusCmd struct {
	JSON bool `help:"Print JSON (the shape of the admin API's GET /api/v1/status)."`
	natsFlags
	allFlags
}

// Run implements the status command: the overview package ops reads for
// the admin API too. Without a way to reach JetStream it still prints the
// Postgres part, then fails with the reason.
func (c *statusCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	return withOptionalJS(ctx, cfg, rt, c.natsFlags, func(o *ops.Ops, jsErr error) error {
		st, err := o.Status(ctx, nil)
		if err != nil {
			return dbError(err)
		}
		if jsErr != nil {
			st.JetStreamError = jsErr.Error()
		}
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

func printStatus(w io.Writer, st *ops.Status) error {
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
		if err := printStatusEndpoints(w, st); err != nil {
			return err
		}
	}
	if err := printRetrying(w, st); err != nil {
		return err
	}
	if err := printPostponed(w, st); err != nil {
		return err
	}
	t := newTable(w, "POSTGRES", "COUNT")
	t.row("outbox pending", fmt.Sprint(st.Outbox.Pending))
	t.row("outbox oldest pending", seconds(st.Outbox.OldestPendingAgeSeconds).Round(time.Millisecond).String())
	t.row("outbox dead", fmt.Sprint(st.Outbox.Dead))
	t.row("dead letters unresolved", fmt.Sprint(st.DeadLettersUnresolved))
	t.row("conflicts", fmt.Sprint(st.Conflicts))
	return t.flush()
}

// printStatusEndpoints prints the delivery endpoints and the durables of
// endpoints no longer configured.
func printStatusEndpoints(w io.Writer, st *ops.Status) error {
	if len(st.Endpoints) > 0 {
		if err := printEndpoints(w, st.Endpoints); err != nil {
			return err
		}
	}
	if st.EndpointsError != "" {
		fmt.Fprintf(w, "ENDPOINTS NOT SHOWN: %s\n", st.EndpointsError)
	}
	for _, d := range st.OrphanedEndpointDurables {
		fmt.Fprintf(w, "ORPHANED: durable %s on EVENTS belongs to no configured endpoint; EVENTS keeps what it has not acked. "+
			"Remove it with `nats consumer rm EVENTS %s`\n", d, d)
	}
	if len(st.Endpoints) > 0 || len(st.OrphanedEndpointDurables) > 0 || st.EndpointsError != "" {
		fmt.Fprintln(w)
	}
	return nil
}

// seconds is a figure in seconds as a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// replayReach is how far back a replay of a stream reaches, written the
// way status and the console both show it: the oldest message still
// stored, by sequence and time (a stream's max age is only the limit
// that trims it; the storage guard and max_bytes trim it too).
func replayReach(s ops.StreamStatus, now time.Time) string {
	if s.Messages == 0 || s.FirstTime == nil {
		return "nothing stored"
	}
	return fmt.Sprintf("seq %d, %s (%s ago)", s.FirstSeq, fmtTime(*s.FirstTime), now.Sub(*s.FirstTime).Round(time.Second))
}

func printStreams(w io.Writer, st *ops.Status) error {
	now := time.Now()
	t := newTable(w, "STREAM", "MESSAGES", "BYTES", "LIMIT", "LAST SEQ", "LAST", "REPLAY REACHES BACK TO", "MAX AGE")
	for _, s := range st.Streams {
		limit := "none"
		if s.MaxBytes > 0 {
			limit = fmt.Sprintf("%d (%.0f%%)", s.MaxBytes, 100*float64(s.Bytes)/float64(s.MaxBytes))
		}
		t.row(s.Name, fmt.Sprint(s.Messages), fmt.Sprint(s.Bytes), limit, fmt.Sprint(s.LastSeq), fmtTimePtr(s.LastTime),
			replayReach(s, now), seconds(s.MaxAgeSeconds).String())
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

func printConsumers(w io.Writer, st *ops.Status) error {
	t := newTable(w, "STREAM", "CONSUMER", "PENDING", "ACK PENDING", "REDELIVERED", "RETRYING", "POSTPONED", "ACK FLOOR", "OLDEST UNACKED", "DEAD LETTERS")
	for _, c := range st.Consumers {
		oldest := "-"
		if c.OldestUnackedAgeSeconds > 0 {
			oldest = seconds(c.OldestUnackedAgeSeconds).Round(time.Second).String()
		}
		name := c.Name
		if c.Paused {
			name += " (paused)"
		}
		if c.Orphaned {
			name += " (orphaned)"
		}
		t.row(c.Stream, name, fmt.Sprint(c.Pending), fmt.Sprint(c.AckPending), fmt.Sprint(c.Redelivered),
			fmt.Sprint(c.Retrying), fmt.Sprint(c.Postponed), fmt.Sprint(c.AckFloorSeq), oldest, fmt.Sprint(st.DeadLettersByConsumer[c.Name]))
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
func printRetrying(w io.Writer, st *ops.Status) error {
	if len(st.Retrying) == 0 {
		return nil
	}
	fmt.Fprintf(w, "RETRYING: %d event(s) failing now, each redelivered after its backoff and dead-lettered at max_deliver%s\n",
		total(st.RetryingByConsumer), shown(st.RetryingByConsumer, st.Retrying))
	t := newTable(w, "CONSUMER", "SOURCE", "EVENT ID", "SEQ", "FAILURES", "LAST FAILED", "LAST ERROR")
	for _, f := range st.Retrying {
		t.row(f.Consumer, f.Source, f.EventID, fmt.Sprint(f.StreamSeq), fmt.Sprint(f.Failures), fmtTime(f.LastFailedAt), clip(f.LastError, 100))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

// printPostponed lists the events their handler postponed until a later
// event of their key, with the time first postponed: they are not
// failing, and are dead-lettered only once they waited postpone_limit.
func printPostponed(w io.Writer, st *ops.Status) error {
	if len(st.Postponed) == 0 {
		return nil
	}
	fmt.Fprintf(w, "POSTPONED: %d event(s) waiting for a later event of their key, each dead-lettered once postponed for longer than postpone_limit%s\n",
		total(st.PostponedByConsumer), shown(st.PostponedByConsumer, st.Postponed))
	now := time.Now()
	t := newTable(w, "CONSUMER", "SOURCE", "EVENT ID", "SEQ", "POSTPONED SINCE", "WAITING", "FAILURES", "LAST ERROR")
	for _, f := range st.Postponed {
		since, waiting := "-", "-"
		if f.PostponedSince != nil {
			since, waiting = fmtTime(*f.PostponedSince), now.Sub(*f.PostponedSince).Round(time.Second).String()
		}
		t.row(f.Consumer, f.Source, f.EventID, fmt.Sprint(f.StreamSeq), since, waiting, fmt.Sprint(f.Failures), clip(f.LastError, 100))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

func total(byConsumer map[string]int64) int64 {
	var n int64
	for _, c := range byConsumer {
		n += c
	}
	return n
}

// shown says how many of a cut list are shown.
func shown(byConsumer map[string]int64, list []ops.RetryingEvent) string {
	if total(byConsumer) > int64(len(list)) {
		return fmt.Sprintf(" (the %d most recent shown)", len(list))
	}
	return ""
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}
