package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The operator's overview of a deployment (`hookbridge status`): what
// the streams hold, how far behind each consumer is, and the outbox,
// dead-letter and conflict counts in Postgres.

// Status is the operator's overview.
type Status struct {
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
	Outbox    OutboxStatus     `json:"outbox"`
	// DeadLetters counts unresolved dead letters per consumer.
	DeadLetters map[string]int64 `json:"dead_letters_unresolved"`
	Conflicts   int64            `json:"conflicts"`
	// ConflictsUnresolved counts the conflicts nobody resolved yet.
	ConflictsUnresolved int64 `json:"conflicts_unresolved"`
	// OrphanedDurables are the durables on HOOKS that no configured
	// consumer owns (see [Status.ApplyConfig]): they keep every message
	// they have not acked in HOOKS until deleted (`hookbridge consumers
	// delete NAME`).
	OrphanedDurables []string `json:"orphaned_durables"`
	// Retrying are the events failing right now (the most recent failure
	// first, at most [RetryingShown]): each is redelivered after its
	// backoff and dead-lettered when its failures reach max_deliver.
	// RetryingByConsumer counts them all per consumer.
	Retrying           []store.Failure  `json:"retrying"`
	RetryingByConsumer map[string]int64 `json:"retrying_by_consumer"`
	// JetStreamError says why streams and consumers are missing.
	JetStreamError string `json:"jetstream_error,omitempty"`
}

// StreamStatus is one stream. FirstTime is how far back a replay reaches:
// HOOKS's messages leave once every consumer has applied them and they
// are older than max_age, or sooner when its space runs short; the other
// streams' leave by max_age.
type StreamStatus struct {
	Name      string    `json:"name"`
	Messages  uint64    `json:"messages"`
	Bytes     uint64    `json:"bytes"`
	FirstSeq  uint64    `json:"first_seq"`
	LastSeq   uint64    `json:"last_seq"`
	FirstTime time.Time `json:"first_time"`
	LastTime  time.Time `json:"last_time"`
	// MaxBytes is the byte limit (-1: none), MaxAgeSeconds the age limit
	// (HOOKS: the age from which applied messages are deleted).
	MaxBytes      int64   `json:"max_bytes"`
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	// Full says why the stream refuses its next message ("" while it has
	// room; a full server store shows only in the ingress's answers).
	Full string `json:"full,omitempty"`
	// LowestAckFloor (HOOKS) is the lowest retention floor of its
	// consumers: every consumer has acked, or will never receive, the
	// messages up to it, which are trimmed first.
	LowestAckFloor *uint64 `json:"lowest_ack_floor,omitempty"`
}

// ConsumerStatus is one durable consumer.
type ConsumerStatus struct {
	Stream         string `json:"stream"`
	Name           string `json:"name"`
	NumPending     uint64 `json:"num_pending"`
	NumAckPending  int    `json:"num_ack_pending"`
	NumRedelivered int    `json:"num_redelivered"`
	// AckFloor is the stream sequence up to which every message is acked;
	// OldestUnackedSeconds the age of the first message after it (0: none).
	AckFloor             uint64  `json:"ack_floor"`
	OldestUnackedSeconds float64 `json:"oldest_unacked_seconds"`
	// DeliveredSeq is the last stream sequence delivered; Paused whether
	// an operator paused the consumer (nats-server 2.11 and later).
	DeliveredSeq uint64 `json:"delivered_seq"`
	Paused       bool   `json:"paused"`
	// Orphaned marks a consumer on HOOKS that no configured consumer is:
	// its durables (its own and its partitions') are orphans.
	Orphaned bool `json:"orphaned"`
	// Partitions are the durables of a keyed consumer's partitions; the
	// counts above include theirs. Members are the instances serving
	// them, each with its partitions and their backlog.
	Partitions []PartitionStatus `json:"partitions,omitempty"`
	Members    []MemberStatus    `json:"members,omitempty"`

	// own: the consumer's own durable is on the stream (not only its
	// partitions', and not an ephemeral consumer).
	own bool
}

// PartitionStatus is one partition durable of a keyed consumer.
type PartitionStatus struct {
	Partition     int    `json:"partition"`
	NumPending    uint64 `json:"num_pending"`
	NumAckPending int    `json:"num_ack_pending"`
	AckFloor      uint64 `json:"ack_floor"`
	// Pinned says whether an instance holds the partition's pin now.
	Pinned bool `json:"pinned"`
}

// MemberStatus is one instance serving a keyed consumer's partitions.
type MemberStatus struct {
	engine.Member
	// Backlog is the messages of its partitions not yet applied
	// (pending and unacked): its lag.
	Backlog uint64 `json:"backlog"`
}

// OutboxStatus summarises hookbridge.outbox.
type OutboxStatus struct {
	Pending             int64   `json:"pending"`
	Dead                int64   `json:"dead"`
	Sent                int64   `json:"sent"`
	OldestPendingSecond float64 `json:"oldest_pending_seconds"`
}

// RetryingShown is how many failing events the overview lists.
const RetryingShown = 20

// replayConsumerPrefix names the ephemeral consumers of running replays;
// they are not part of the deployment's state.
const replayConsumerPrefix = durables.ReplayPrefix

// NewStatus is an empty overview whose lists encode as [] rather than
// null in JSON.
func NewStatus() Status {
	return Status{Streams: []StreamStatus{}, Consumers: []ConsumerStatus{}, OrphanedDurables: []string{},
		Retrying: []store.Failure{}, RetryingByConsumer: map[string]int64{}}
}

// ApplyConfig compares what JetStream holds with cfg: it marks the
// durables on HOOKS that no consumer of cfg owns (a consumer owns its
// own durable and its partition durables), and gives HOOKS the age
// horizon cfg sets, which the storage guard applies (HOOKS has no
// JetStream max age).
func (st *Status) ApplyConfig(cfg Config) {
	var configured []string
	for _, cc := range cfg.Consumers {
		configured = append(configured, cc.Name)
	}
	st.OrphanedDurables = []string{}
	for i := range st.Consumers {
		c := &st.Consumers[i]
		owner, _ := stream.ConsumerOfDurable(c.Name)
		c.Orphaned = c.Stream == stream.Hooks && (c.own || len(c.Partitions) > 0) && (owner == "" || !slices.Contains(configured, owner))
		if !c.Orphaned {
			continue
		}
		if c.own {
			st.OrphanedDurables = append(st.OrphanedDurables, c.Name)
		}
		for _, p := range c.Partitions {
			st.OrphanedDurables = append(st.OrphanedDurables, stream.PartitionDurable(c.Name, p.Partition))
		}
	}
	slices.Sort(st.OrphanedDurables)
	for i := range st.Streams {
		if st.Streams[i].Name == stream.Hooks {
			st.Streams[i].MaxAgeSeconds = (stream.Options{MaxAge: cfg.Streams.MaxAge}).HooksMaxAge().Seconds()
		}
	}
}

// ReadPostgres fills the outbox, dead-letter and conflict counts.
func (st *Status) ReadPostgres(ctx context.Context, pool *pgxpool.Pool) error {
	ob, err := relay.OutboxStats(ctx, pool)
	if err != nil {
		return err
	}
	st.Outbox = OutboxStatus{Pending: ob.Pending, Dead: ob.Dead, Sent: ob.Sent, OldestPendingSecond: ob.OldestPending.Seconds()}
	if st.Conflicts, err = store.ConflictCount(ctx, pool); err != nil {
		return fmt.Errorf("count conflicts: %w", err)
	}
	if st.ConflictsUnresolved, err = store.ConflictCountUnresolved(ctx, pool); err != nil {
		return fmt.Errorf("count conflicts: %w", err)
	}
	if st.DeadLetters, err = unresolvedDeadLetters(ctx, pool); err != nil {
		return err
	}
	if st.Retrying, err = store.FailureList(ctx, pool, RetryingShown); err != nil {
		return fmt.Errorf("list failing events: %w", err)
	}
	if st.RetryingByConsumer, err = store.FailureCountByConsumer(ctx, pool); err != nil {
		return fmt.Errorf("count failing events: %w", err)
	}
	return nil
}

// ReadJetStream fills the streams and their consumers (except the
// ephemeral consumers of running replays).
func (st *Status) ReadJetStream(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		ss := StreamStatus{
			Name: info.Config.Name, Messages: info.State.Msgs, Bytes: info.State.Bytes,
			FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq,
			FirstTime: info.State.FirstTime, LastTime: info.State.LastTime,
			MaxBytes: info.Config.MaxBytes, MaxAgeSeconds: info.Config.MaxAge.Seconds(),
		}
		if err := stream.AtLimit(info); err != nil {
			ss.Full = err.Error()
		}
		st.Streams = append(st.Streams, ss)
	}
	if err := streams.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return fmt.Errorf("list streams: %w", err)
	}
	for _, s := range st.Streams {
		if s.Name == stream.MembersStream {
			// Its consumers are the members' own watches of the bucket,
			// ephemeral and named at random: not the deployment's state.
			continue
		}
		if err := st.readConsumers(ctx, js, s.Name); err != nil {
			return err
		}
	}
	return nil
}

func (st *Status) readConsumers(ctx context.Context, js jetstream.JetStream, streamName string) error {
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("stream %s: %w", streamName, err)
	}
	lastSeq := s.CachedInfo().State.LastSeq // read before the consumers: see durables.Floor
	consumers, err := durables.List(ctx, s)
	if err != nil {
		return err
	}
	// A consumer on HOOKS is its own durable and its partition durables:
	// one row, whose figures are theirs together.
	var order []string
	byName := map[string][]*jetstream.ConsumerInfo{}
	for _, ci := range consumers {
		if strings.HasPrefix(ci.Name, replayConsumerPrefix) {
			continue
		}
		name := ci.Name
		if owner, p := stream.ConsumerOfDurable(ci.Name); streamName == stream.Hooks && p >= 0 {
			name = owner
		}
		if _, ok := byName[name]; !ok {
			order = append(order, name)
		}
		byName[name] = append(byName[name], ci)
	}
	for _, name := range order {
		st.Consumers = append(st.Consumers, consumerStatus(ctx, js, streamName, name, byName[name]))
	}
	if streamName == stream.Hooks {
		if floor, _, err := durables.Floor(ctx, s, nil, consumers, nil, lastSeq); err == nil {
			for i := range st.Streams {
				if st.Streams[i].Name == stream.Hooks {
					st.Streams[i].LowestAckFloor = &floor
				}
			}
		}
	}
	return nil
}

// consumerStatus is the row of consumer name, read from its durables (on
// HOOKS: its own and, for a keyed consumer, its partitions'), with the
// members serving a keyed consumer's partitions.
func consumerStatus(ctx context.Context, js jetstream.JetStream, streamName, name string, infos []*jetstream.ConsumerInfo) ConsumerStatus {
	cs := ConsumerStatus{Stream: streamName, Name: name}
	backlog := map[int]uint64{}
	for _, ci := range infos {
		_, p := stream.ConsumerOfDurable(ci.Name)
		if streamName != stream.Hooks || p < 0 {
			cs.own = cs.own || ci.Config.Durable != ""
			continue
		}
		ps := PartitionStatus{Partition: p, NumPending: ci.NumPending, NumAckPending: ci.NumAckPending, AckFloor: ci.AckFloor.Stream, Pinned: durables.Pinned(ci)}
		cs.Partitions = append(cs.Partitions, ps)
		backlog[p] = ci.NumPending + uint64(ci.NumAckPending)
	}
	f := durables.Sum(infos)
	cs.NumPending, cs.NumAckPending, cs.NumRedelivered = f.Pending, f.AckPending, f.Redelivered
	cs.AckFloor, cs.DeliveredSeq, cs.Paused = f.AckFloor, f.Delivered, f.Paused
	if streamName == stream.Hooks && f.Busy() {
		if age, err := durables.OldestUnacked(ctx, js, infos); err == nil {
			cs.OldestUnackedSeconds = age.Seconds()
		}
	}
	if len(cs.Partitions) == 0 {
		return cs
	}
	slices.SortFunc(cs.Partitions, func(a, b PartitionStatus) int { return cmp.Compare(a.Partition, b.Partition) })
	members, err := engine.Members(ctx, js, name)
	if err != nil {
		return cs // the partitions are shown; who serves them is not known now
	}
	for _, m := range members {
		ms := MemberStatus{Member: m}
		for _, p := range m.Partitions {
			ms.Backlog += backlog[p]
		}
		cs.Members = append(cs.Members, ms)
	}
	return cs
}

// unresolvedDeadLetters counts the unresolved dead letters per consumer,
// for status and for the dead-letter gauge.
func unresolvedDeadLetters(ctx context.Context, pool *pgxpool.Pool) (map[string]int64, error) {
	out, err := store.DeadLetterCountUnresolvedByConsumer(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	return out, nil
}
