package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/hookbridge/hookbridge/internal/ops"
)

// printKeyed shows, per keyed consumer, its partitions (how many an
// instance holds now, and those with a backlog that none holds: applied
// by nobody) and its members with their backlog, their lag.
func printKeyed(w io.Writer, st *ops.Status) error {
	for _, c := range st.Consumers {
		if len(c.Partitions) == 0 || c.Orphaned {
			continue
		}
		pinned := 0
		var unserved []string
		for _, p := range c.Partitions {
			switch {
			case p.Pinned:
				pinned++
			case p.Pending+uint64(p.AckPending) > 0 && !c.Paused:
				unserved = append(unserved, fmt.Sprint(p.Partition))
			}
		}
		fmt.Fprintf(w, "KEYED %s: %d partitions, %d pinned", c.Name, len(c.Partitions), pinned)
		if len(unserved) > 0 {
			fmt.Fprintf(w, "; with a backlog and no member holding it: partition %s", strings.Join(unserved, ", "))
		}
		if len(c.Members) == 0 {
			fmt.Fprintf(w, "; no member runs it now: its keyed events wait\n\n")
			continue
		}
		fmt.Fprintf(w, "; %d member(s)\n", len(c.Members))
		t := newTable(w, "MEMBER", "HOST", "PID", "PARTITIONS", "BACKLOG", "STARTED")
		for _, m := range c.Members {
			t.row(m.ID, m.Host, fmt.Sprint(m.PID), fmt.Sprint(len(m.Partitions)), fmt.Sprint(m.Backlog), fmtTime(m.Started))
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	return nil
}
