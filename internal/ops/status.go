package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Status is the operator's overview of a deployment: what the streams
// hold, how far behind each consumer is, the events failing or postponed
// now, and the outbox, dead-letter and conflict counts in Postgres.
// `hookbridge status --json`, GET /api/v1/status and the console's
// overview are this one shape, read by [Ops.Status].
type Status struct {
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
	Outbox    OutboxStatus     `json:"outbox"`
	// DeadLettersUnresolved counts the unresolved dead letters of all
	// consumers; DeadLettersByConsumer per consumer.
	DeadLettersUnresolved int64            `json:"dead_letters_unresolved"`
	DeadLettersByConsumer map[string]int64 `json:"dead_letters_by_consumer"`
	Conflicts             int64            `json:"conflicts"`
	// ConflictsUnresolved counts the conflicts nobody resolved yet.
	ConflictsUnresolved int64 `json:"conflicts_unresolved"`
	// OrphanedDurables are the durables on HOOKS that no configured
	// consumer owns ([durables.Orphaned]): they keep every message they
	// have not acked in HOOKS until deleted (`hookbridge consumers delete
	// NAME`).
	OrphanedDurables []string `json:"orphaned_durables"`
	// Retrying are the events failing right now (the most recent failure
	// first, at most [RetryingShown]): each is redelivered after its
	// backoff and dead-lettered when its failures reach max_deliver.
	// RetryingByConsumer counts them all per consumer.
	Retrying           []RetryingEvent  `json:"retrying"`
	RetryingByConsumer map[string]int64 `json:"retrying_by_consumer"`
	// Postponed are the events their handler postponed until a later
	// event of their key at their last attempt (the most recent first, at
	// most [RetryingShown]), whatever failures came before: each waits at
	// most postpone_limit from its PostponedSince, then is dead-lettered. PostponedByConsumer counts
	// them all per consumer.
	Postponed           []RetryingEvent  `json:"postponed"`
	PostponedByConsumer map[string]int64 `json:"postponed_by_consumer"`
	// Endpoints are the delivery endpoints: state, owner, backlog and dead
	// letters (empty without JetStream, or when none is configured);
	// OrphanedEndpointDurables the durables on EVENTS of endpoints no
	// longer configured, which keep what they have not acked.
	Endpoints                []EndpointStatus `json:"endpoints"`
	OrphanedEndpointDurables []string         `json:"orphaned_endpoint_durables"`
	// EndpointsError says why configured endpoints are missing from
	// Endpoints (a secret the reader of the configuration cannot read).
	EndpointsError string `json:"endpoints_error,omitempty"`
	// Ready is the readiness of the instance that answers (what its
	// /readyz answers); absent from `hookbridge status`, which runs in no
	// instance.
	Ready *bool `json:"ready,omitempty"`
	// JetStreamError says why streams and consumers are missing.
	JetStreamError string `json:"jetstream_error,omitempty"`
}

// StreamStatus is one stream. FirstSeq and FirstTime are how far back a
// replay reaches: the oldest message still stored (nil time: none).
// HOOKS's messages leave once every consumer has applied them and they
// are older than its max age, or sooner when its space runs short; the
// other streams' leave by their max age.
type StreamStatus struct {
	Name      string     `json:"name"`
	Messages  uint64     `json:"messages"`
	Bytes     uint64     `json:"bytes"`
	FirstSeq  uint64     `json:"first_seq"`
	FirstTime *time.Time `json:"first_time"`
	LastSeq   uint64     `json:"last_seq"`
	LastTime  *time.Time `json:"last_time"`
	// MaxBytes is the byte limit (-1: none), MaxAgeSeconds the age limit
	// (HOOKS: the age from which applied messages are deleted).
	MaxBytes      int64   `json:"max_bytes"`
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	// Full says why the stream refuses its next message ("" while it has
	// room; a full server store shows only in the ingress's answers).
	Full string `json:"full,omitempty"`
	// LowestAckFloor (HOOKS) is the lowest retention floor of its
	// consumers ([durables.Floor]): every consumer has acked, or will
	// never receive, the messages up to it, which are trimmed first.
	LowestAckFloor *uint64 `json:"lowest_ack_floor,omitempty"`
}

// ConsumerStatus is one consumer of a stream. On HOOKS a consumer is its
// own durable and, when keyed, its partition durables: one row whose
// figures are theirs together ([durables.Sum]; docs/OPERATIONS.md,
// "Keyed consumers").
type ConsumerStatus struct {
	Name        string `json:"name"`
	Stream      string `json:"stream"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"` // redeliveries of any cause
	// Retrying counts its events failing right now, Postponed those its
	// handler postponed (see [Status.Retrying], [Status.Postponed]).
	Retrying     int64  `json:"retrying"`
	Postponed    int64  `json:"postponed"`
	DeliveredSeq uint64 `json:"delivered_seq"`
	// AckFloorSeq is the stream sequence up to which every message is
	// acked; OldestUnackedAgeSeconds the age of the oldest message not
	// acked yet (0: none).
	AckFloorSeq             uint64  `json:"ack_floor_seq"`
	OldestUnackedAgeSeconds float64 `json:"oldest_unacked_age_seconds"`
	// Paused: an operator paused the consumer (nats-server 2.11 and
	// later).
	Paused bool `json:"paused"`
	// Orphaned marks a consumer on HOOKS that no configured consumer is:
	// its durables (its own and its partitions') are orphans.
	Orphaned bool `json:"orphaned"`
	// Partitions are a keyed consumer's partition durables (the counts
	// above include theirs) and Members the instances serving them; both
	// absent for a consumer without an ordering key.
	Partitions []PartitionStatus `json:"partitions,omitempty"`
	Members    []MemberStatus    `json:"members,omitempty"`
}

// PartitionStatus is one partition durable of a keyed consumer.
type PartitionStatus struct {
	Partition  int    `json:"partition"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
	// AckFloorSeq is the partition durable's own ack floor.
	AckFloorSeq uint64 `json:"ack_floor_seq"`
	// Pinned says whether an instance holds the partition now; a
	// partition with a backlog and no pin is applied by nobody.
	Pinned bool `json:"pinned"`
}

// MemberStatus is one instance serving a keyed consumer's partitions.
type MemberStatus struct {
	ID         string    `json:"id"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Started    time.Time `json:"started"`
	Partitions []int     `json:"partitions"`
	// Backlog is the messages of its partitions not applied yet (pending
	// and ack pending): its lag.
	Backlog uint64 `json:"backlog"`
}

// OutboxStatus counts the rows of hookbridge.outbox.
type OutboxStatus struct {
	Pending                 int64   `json:"pending"`
	Dead                    int64   `json:"dead"`
	Sent                    int64   `json:"sent"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// RetryingEvent is one event a consumer has tried and not settled yet:
// failing now (redelivered after its backoff, dead-lettered when Failures
// reaches max_deliver), or postponed by its handler since PostponedSince
// (it waits for a later event of its key; a postponement is no failure).
type RetryingEvent struct {
	Consumer     string    `json:"consumer"`
	Source       string    `json:"source"`
	EventID      string    `json:"event_id"`
	StreamSeq    uint64    `json:"stream_seq"`
	Failures     int       `json:"failures"`
	LastError    string    `json:"last_error"`
	LastFailedAt time.Time `json:"last_failed_at"`
	// PostponedSince is when its handler first postponed it since it last
	// failed; nil for an event whose last attempt failed.
	PostponedSince *time.Time `json:"postponed_since,omitempty"`
}

// RetryingShown is how many failing events, and how many postponed ones,
// the overview lists.
const RetryingShown = 20

// statusTimeout bounds the JetStream part of one overview.
const statusTimeout = 10 * time.Second

// Status reads the overview: Postgres, then, when the Ops has JetStream,
// the streams and their consumers, compared with the configured
// consumers (orphans) and HooksMaxAge. A JetStream failure leaves the
// streams out and says why (JetStreamError); a Postgres failure is the
// error. ready, when set, is asked for the answering instance's
// readiness.
func (o *Ops) Status(ctx context.Context, ready func(context.Context) bool) (Status, error) {
	st := Status{Streams: []StreamStatus{}, Consumers: []ConsumerStatus{}, OrphanedDurables: []string{},
		Retrying: []RetryingEvent{}, Postponed: []RetryingEvent{}, Endpoints: []EndpointStatus{}, OrphanedEndpointDurables: []string{}}
	if err := o.statusPostgres(ctx, &st); err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	if o.JS == nil {
		st.JetStreamError = errNoJetStream.Error()
	} else if err := o.statusJetStream(ctx, &st); err != nil {
		st.JetStreamError = err.Error()
	} else if err := o.statusEndpoints(ctx, &st); err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	for i := range st.Consumers {
		c := &st.Consumers[i]
		c.Retrying, c.Postponed = st.RetryingByConsumer[c.Name], st.PostponedByConsumer[c.Name]
	}
	if ready != nil {
		r := ready(ctx)
		st.Ready = &r
	}
	return st, nil
}

// statusEndpoints fills the delivery endpoints and the orphaned durables
// on EVENTS.
func (o *Ops) statusEndpoints(ctx context.Context, st *Status) error {
	if err := o.endpointsErr(); err != nil {
		st.EndpointsError = err.Error()
	}
	if len(o.Endpoints) > 0 {
		eps, err := delivery.Status(ctx, o.Pool, o.JS, o.Endpoints)
		if err != nil {
			return err
		}
		st.Endpoints = eps
	}
	names := make([]string, 0, len(o.Endpoints))
	for _, e := range o.Endpoints {
		names = append(names, e.Name)
	}
	orphans, err := delivery.Orphans(ctx, o.JS, names)
	if err != nil {
		st.JetStreamError = err.Error()
		return nil
	}
	if o.EndpointsErr == nil && orphans != nil {
		// With endpoints unreadable, a configured one would look orphaned.
		st.OrphanedEndpointDurables = orphans
	}
	return nil
}

// statusPostgres fills the outbox, dead-letter, conflict and failure
// figures.
func (o *Ops) statusPostgres(ctx context.Context, st *Status) error {
	ob, err := relay.OutboxStats(ctx, o.Pool)
	if err != nil {
		return err
	}
	st.Outbox = OutboxStatus{Pending: ob.Pending, Dead: ob.Dead, Sent: ob.Sent, OldestPendingAgeSeconds: ob.OldestPending.Seconds()}
	if st.Conflicts, err = store.ConflictCount(ctx, o.Pool); err != nil {
		return fmt.Errorf("count conflicts: %w", err)
	}
	if st.ConflictsUnresolved, err = store.ConflictCountUnresolved(ctx, o.Pool); err != nil {
		return fmt.Errorf("count conflicts: %w", err)
	}
	if st.DeadLettersByConsumer, err = store.DeadLetterCountUnresolvedByConsumer(ctx, o.Pool); err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	for _, n := range st.DeadLettersByConsumer {
		st.DeadLettersUnresolved += n
	}
	if st.RetryingByConsumer, st.PostponedByConsumer, err = store.FailureCountByConsumer(ctx, o.Pool); err != nil {
		return fmt.Errorf("count failing events: %w", err)
	}
	for _, postponed := range []bool{false, true} {
		rows, err := store.FailureList(ctx, o.Pool, postponed, RetryingShown)
		if err != nil {
			return fmt.Errorf("list failing events: %w", err)
		}
		for _, f := range rows {
			ev := RetryingEvent{Consumer: f.Consumer, Source: f.Source, EventID: f.EventID, StreamSeq: f.StreamSeq,
				Failures: f.Failures, LastError: f.LastError, LastFailedAt: f.UpdatedAt.UTC(), PostponedSince: utcPtr(f.PostponedSince)}
			if postponed {
				st.Postponed = append(st.Postponed, ev)
			} else {
				st.Retrying = append(st.Retrying, ev)
			}
		}
	}
	return nil
}

// statusJetStream fills the streams and their consumers (except the
// ephemeral consumers of running replays).
func (o *Ops) statusJetStream(ctx context.Context, st *Status) error {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	streams := o.JS.ListStreams(ctx)
	for info := range streams.Info() {
		st.Streams = append(st.Streams, o.streamStatus(info))
	}
	if err := streams.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return fmt.Errorf("list streams: %w", err)
	}
	for i := range st.Streams {
		if st.Streams[i].Name == stream.MembersStream {
			// Its consumers are the members' own watches of the bucket,
			// ephemeral and named at random: not the deployment's state.
			continue
		}
		if err := o.streamConsumers(ctx, st, &st.Streams[i]); err != nil {
			return err
		}
	}
	return nil
}

// streamStatus is one stream as the overview shows it.
func (o *Ops) streamStatus(info *jetstream.StreamInfo) StreamStatus {
	s := StreamStatus{
		Name: info.Config.Name, Messages: info.State.Msgs, Bytes: info.State.Bytes,
		FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq,
		MaxBytes: info.Config.MaxBytes, MaxAgeSeconds: info.Config.MaxAge.Seconds(),
	}
	if s.Messages > 0 && !info.State.FirstTime.IsZero() {
		s.FirstTime = utcPtr(&info.State.FirstTime)
	}
	if s.LastSeq > 0 && !info.State.LastTime.IsZero() {
		s.LastTime = utcPtr(&info.State.LastTime)
	}
	if s.Name == stream.Hooks && o.HooksMaxAge > 0 {
		// HOOKS has no JetStream max age: the storage guard applies the
		// configured one to applied messages only.
		s.MaxAgeSeconds = o.HooksMaxAge.Seconds()
	}
	if err := stream.AtLimit(info); err != nil {
		s.Full = err.Error()
	}
	return s
}

// streamConsumers adds the consumers of stream s. A consumer on HOOKS is
// its own durable and its partition durables: one row, whose figures are
// theirs together.
func (o *Ops) streamConsumers(ctx context.Context, st *Status, s *StreamStatus) error {
	js, err := o.JS.Stream(ctx, s.Name)
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.Name, err)
	}
	lastSeq := js.CachedInfo().State.LastSeq // read before the consumers: see durables.Floor
	consumers, err := durables.List(ctx, js)
	if err != nil {
		return err
	}
	hooks := s.Name == stream.Hooks
	var order []string
	byName := map[string][]*jetstream.ConsumerInfo{}
	for _, ci := range consumers {
		if strings.HasPrefix(ci.Name, durables.ReplayPrefix) {
			continue
		}
		name := ci.Name
		if owner, p := stream.ConsumerOfDurable(ci.Name); hooks && p >= 0 {
			name = owner
		}
		if _, ok := byName[name]; !ok {
			order = append(order, name)
		}
		byName[name] = append(byName[name], ci)
	}
	configured := o.consumerNames()
	for _, name := range order {
		c := o.consumerStatus(ctx, s.Name, name, byName[name])
		c.Orphaned = hooks && slices.ContainsFunc(byName[name], func(ci *jetstream.ConsumerInfo) bool {
			return durables.Orphaned(ci, configured)
		})
		st.Consumers = append(st.Consumers, c)
	}
	if hooks {
		st.OrphanedDurables = durables.Orphans(consumers, configured)
		if floor, _, err := durables.Floor(ctx, js, nil, consumers, nil, lastSeq); err == nil {
			s.LowestAckFloor = &floor
		}
	}
	return nil
}

// consumerStatus is the row of consumer name, read from its durables (on
// HOOKS: its own and, for a keyed consumer, its partitions'), with the
// members serving a keyed consumer's partitions.
func (o *Ops) consumerStatus(ctx context.Context, streamName, name string, infos []*jetstream.ConsumerInfo) ConsumerStatus {
	sums := durables.Sum(infos)
	c := ConsumerStatus{Name: name, Stream: streamName, Pending: sums.Pending, AckPending: sums.AckPending,
		Redelivered: sums.Redelivered, DeliveredSeq: sums.Delivered, AckFloorSeq: sums.AckFloor, Paused: sums.Paused}
	if streamName != stream.Hooks {
		return c
	}
	if sums.Busy() {
		if age, err := durables.OldestUnacked(ctx, o.JS, infos); err == nil {
			c.OldestUnackedAgeSeconds = age.Seconds()
		}
	}
	backlog := map[int]uint64{}
	for _, ci := range infos {
		if _, p := stream.ConsumerOfDurable(ci.Name); p >= 0 {
			c.Partitions = append(c.Partitions, PartitionStatus{Partition: p, Pending: ci.NumPending, AckPending: ci.NumAckPending,
				AckFloorSeq: ci.AckFloor.Stream, Pinned: durables.Pinned(ci)})
			backlog[p] = ci.NumPending + uint64(ci.NumAckPending)
		}
	}
	if len(c.Partitions) == 0 {
		return c
	}
	slices.SortFunc(c.Partitions, func(a, b PartitionStatus) int { return cmp.Compare(a.Partition, b.Partition) })
	members, err := engine.Members(ctx, o.JS, name)
	if err != nil {
		return c // the partitions are shown; who serves them is not known now
	}
	for _, m := range members {
		ms := MemberStatus{ID: m.ID, Host: m.Host, PID: m.PID, Started: m.Started.UTC(), Partitions: m.Partitions}
		if ms.Partitions == nil {
			ms.Partitions = []int{}
		}
		for _, p := range m.Partitions {
			ms.Backlog += backlog[p]
		}
		c.Members = append(c.Members, ms)
	}
	return c
}
