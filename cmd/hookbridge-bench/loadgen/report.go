package loadgen

import (
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
)

// Print writes the run's summary table.
func (r *Result) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	if r.Name != "" {
		row("run", "%s", r.Name)
	}
	row("target", "%s", r.URL)
	row("run id", "%s", r.RunID)
	load := fmt.Sprintf("%d events, concurrency %d, closed loop", r.Total, r.Concurrency)
	if r.Rate > 0 {
		load = fmt.Sprintf("%d events, concurrency %d, %.0f events/s scheduled", r.Total, r.Concurrency, r.Rate)
	}
	row("load", "%s", load)
	codes := slices.Sorted(maps.Keys(r.Statuses))
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s×%d", c, r.Statuses[c]))
	}
	row("answers", "%d accepted, %d duplicate, %d failed, %d retries (%s)", r.Accepted, r.Duplicates, r.Failed, r.Retries, strings.Join(parts, " "))
	row("ingress throughput", "%.0f req/s over %.2fs", r.IngressRPS, r.SendSeconds)
	row("ingress latency", "%s", r.Ingress)
	row("machine CPU busy while sending", "%.0f%% of %d CPUs (all processes)", 100*r.MachineBusy, runtime.NumCPU())
	row("process CPU while sending", "%.2fs = %.0f µs per request (this process: the load generator, and the server when in-process)", r.SendCPUSeconds, r.CPUPerRequestUs)
	if r.E2E != nil {
		row("applied", "%d", r.Applied)
		row("end-to-end latency", "%s (to the committed inbox row)", r.E2E)
		if r.RelayE2E != nil {
			row("relayed", "%d", r.Relayed)
			row("end-to-end latency", "%s (to the relayed event on events.>)", r.RelayE2E)
		}
		row("apply throughput", "%.0f events/s (first to last inbox row seen)", r.ApplyRate)
		if r.RelayE2E != nil {
			row("pipeline throughput", "%.0f events/s (first send to last relayed event)", r.PipelineRate)
		} else {
			row("pipeline throughput", "%.0f events/s (first send to last inbox row seen)", r.PipelineRate)
		}
	}
	if r.WAL != nil {
		row("Postgres WAL", "%s (first send to the last relayed row recorded; the whole server's WAL)", r.WAL)
	}
	if r.Redelivered != nil {
		row("JetStream redeliveries", "%d (to the consumer; 0 = no buffered message outlived ack_wait)", *r.Redelivered)
	}
	if r.PollErrors > 0 {
		row("inbox poll errors", "%d", r.PollErrors)
	}
	if r.RSS != nil && r.RSS.Samples > 0 {
		row("RSS ("+r.RSS.Of+")", "start %d MiB, peak %d MiB, end %d MiB (%d samples)",
			r.RSS.StartKB/1024, r.RSS.PeakKB/1024, r.RSS.EndKB/1024, r.RSS.Samples)
	}
	if r.Check != nil {
		row("exactly-once check", "%s", strings.ReplaceAll(r.Check.String(), "\n", "\n\t"))
	}
	tw.Flush()
}
