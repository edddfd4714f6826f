package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Replay sends events of EVENTS to one endpoint again, through stream
// redelivery: a consumer of its own reads the selected events (headers
// only) and each becomes a pending delivery of the endpoint, which its
// reader sends with the same webhook-id, reading the body again from
// EVENTS by sequence, within the endpoint's rate limit and concurrency.
// An event already pending for the endpoint is not queued twice.

// MaxReplay bounds the events one replay queues.
const MaxReplay = 100000

// ReplaySelector selects the events of a [Replay]. Zero fields select
// any; at least one must be set.
type ReplaySelector struct {
	// FromSeq and ToSeq bound the stream sequences (inclusive).
	FromSeq, ToSeq uint64
	// Since and Until bound when the events were stored ([Since, Until)).
	Since, Until time.Time
	// Subject is an EVENTS subject or filter ("events.orders.>"); only
	// the events the endpoint receives are replayed.
	Subject string
	// EventIDs are the events' webhook-ids.
	EventIDs []string
	// Limit bounds the events queued (0: [MaxReplay]).
	Limit int
}

// ReplayResult counts what a [Replay] did.
type ReplayResult struct {
	// Matched is how many events the selector found for the endpoint.
	Matched int `json:"matched"`
	// Queued is how many became pending deliveries (0 in a dry run);
	// AlreadyPending how many were pending already.
	Queued         int  `json:"queued"`
	AlreadyPending int  `json:"already_pending"`
	DryRun         bool `json:"dry_run,omitempty"`
	// Truncated says the selector found more than the limit.
	Truncated bool `json:"truncated,omitempty"`
}

// Replay queues the events sel selects for endpoint e (or only counts
// them, dryRun).
func Replay(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, e Endpoint, sel ReplaySelector, dryRun bool) (ReplayResult, error) {
	e = e.WithDefaults()
	if sel.FromSeq == 0 && sel.ToSeq == 0 && sel.Since.IsZero() && sel.Until.IsZero() && sel.Subject == "" && len(sel.EventIDs) == 0 {
		return ReplayResult{}, errors.New("replay: select events by sequence, time, subject or event id")
	}
	limit := sel.Limit
	if limit <= 0 || limit > MaxReplay {
		limit = MaxReplay
	}
	filters := e.Subjects
	if sel.Subject != "" {
		filters = []string{sel.Subject}
	}
	found, truncated, err := scanEvents(ctx, js, filters, sel, func(subject string) bool {
		return slices.ContainsFunc(e.Subjects, func(f string) bool { return subjectMatches(f, subject) })
	}, limit)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay to %s: %w", e.Name, err)
	}
	res := ReplayResult{Matched: len(found), DryRun: dryRun, Truncated: truncated}
	if dryRun || len(found) == 0 {
		return res, nil
	}
	rows := make([]store.DeliveryPending, 0, len(found))
	for _, f := range found {
		rows = append(rows, store.DeliveryPending{StreamSeq: f.seq, EventID: f.id, Subject: f.subject, OrderingKey: endpointKey(&e, f.header, f.subject)})
	}
	for chunk := range slices.Chunk(rows, 1000) {
		n, err := store.DeliveryPendingReplay(ctx, pool, e.Name, e.Ordered, chunk)
		if err != nil {
			return res, fmt.Errorf("replay to %s: queue: %w", e.Name, err)
		}
		res.Queued += n
		if e.Ordered {
			// A replay queued behind its key's last row as that row ended
			// is made due now (the row's end could not see it).
			endpoints, keys := make([]string, 0, len(chunk)), make([]string, 0, len(chunk))
			for _, r := range chunk {
				endpoints, keys = append(endpoints, e.Name), append(keys, r.OrderingKey)
			}
			if err := store.DeliveryPendingPromoteHeads(ctx, pool, endpoints, keys); err != nil {
				return res, fmt.Errorf("replay to %s: make the replayed deliveries due: %w", e.Name, err)
			}
		}
	}
	res.AlreadyPending = res.Matched - res.Queued
	return res, nil
}

type scanned struct {
	seq     uint64
	id      string
	subject string
	header  nats.Header
}

// scanEvents reads the headers of the EVENTS messages on filters that
// sel selects and keep accepts, at most limit of them (truncated: there
// were more), through an ordered consumer of its own.
func scanEvents(ctx context.Context, js jetstream.JetStream, filters []string, sel ReplaySelector, keep func(string) bool, limit int) ([]scanned, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, HeadersOnly: true, InactiveThreshold: time.Minute,
		NamePrefix: "hookbridge_replay_" + nuid.Next(), DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case sel.FromSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, sel.FromSeq
	case !sel.Since.IsZero():
		since := sel.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.OrderedConsumer(ctx, stream.Events, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", stream.Events, err)
	}
	ci := cons.CachedInfo()
	if ci == nil {
		return nil, false, fmt.Errorf("read %s: no consumer info", stream.Events)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		_ = js.DeleteConsumer(dctx, stream.Events, ci.Name) // best effort: it expires anyway
	}()
	ids := map[string]bool{}
	for _, id := range sel.EventIDs {
		ids[id] = true
	}
	var out []scanned
	for left := ci.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", stream.Events, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			left = md.NumPending
			seq := md.Sequence.Stream
			if (sel.ToSeq > 0 && seq > sel.ToSeq) || (!sel.Until.IsZero() && !md.Timestamp.Before(sel.Until)) {
				return out, false, nil
			}
			if !sel.Since.IsZero() && md.Timestamp.Before(sel.Since) {
				// Read from FromSeq: the time still bounds it from below.
				continue
			}
			h := m.Headers()
			id := eventID(h, seq)
			if len(ids) > 0 && !ids[id] || !keep(m.Subject()) {
				continue
			}
			if len(out) == limit {
				return out, true, nil
			}
			out = append(out, scanned{seq: seq, id: id, subject: m.Subject(), header: h})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, false, fmt.Errorf("read %s: %w", stream.Events, err)
		}
		if n == 0 {
			return nil, false, fmt.Errorf("read %s: no message in 5s with %d left", stream.Events, left)
		}
	}
	return out, false, nil
}

// subjectMatches reports whether subject matches filter (NATS wildcards:
// "*" one token, ">" the rest).
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		switch {
		case f == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// endpointKey is an event's ordering key on endpoint e ("" when e is not
// ordered): the value of the header KeyHeader, else the subject.
func endpointKey(e *Endpoint, h nats.Header, subject string) string {
	if !e.Ordered {
		return ""
	}
	if e.KeyHeader != "" {
		if k := h.Get(e.KeyHeader); k != "" {
			return "h:" + k
		}
	}
	return "s:" + subject
}
