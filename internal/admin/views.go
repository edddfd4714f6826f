package admin

import (
	"time"
	"unicode/utf8"

	"github.com/hookbridge/hookbridge/internal/ops"
)

// Status is the answer of GET /api/v1/status.
type Status struct {
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
	Outbox    OutboxStatus     `json:"outbox"`
	// DeadLettersUnresolved counts the unresolved dead letters of all
	// consumers; DeadLettersByConsumer per consumer.
	DeadLettersUnresolved int64            `json:"dead_letters_unresolved"`
	DeadLettersByConsumer map[string]int64 `json:"dead_letters_by_consumer"`
	Conflicts             int64            `json:"conflicts"`
	ConflictsUnresolved   int64            `json:"conflicts_unresolved"`
	// OrphanedDurables are the durables on HOOKS no configured consumer
	// owns; they keep every message they have not acked in HOOKS.
	OrphanedDurables []string `json:"orphaned_durables"`
	// Retrying are the events failing right now, the most recent failure
	// first (a bounded list); RetryingByConsumer counts them all.
	Retrying           []RetryingEvent  `json:"retrying"`
	RetryingByConsumer map[string]int64 `json:"retrying_by_consumer"`
	// Ready is the instance's readiness (what /readyz answers).
	Ready bool `json:"ready"`
	// JetStreamError says why streams and consumers are missing.
	JetStreamError string `json:"jetstream_error,omitempty"`
}

// StreamStatus is one stream. FirstSeq and FirstTime are how far back a
// replay reaches: the oldest message still stored (nil time: none).
type StreamStatus struct {
	Name          string     `json:"name"`
	Messages      uint64     `json:"messages"`
	Bytes         uint64     `json:"bytes"`
	FirstSeq      uint64     `json:"first_seq"`
	FirstTime     *time.Time `json:"first_time"`
	LastSeq       uint64     `json:"last_seq"`
	MaxBytes      int64      `json:"max_bytes"`
	MaxAgeSeconds float64    `json:"max_age_seconds"`
}

// RetryingEvent is one event failing right now: redelivered after its
// backoff, dead-lettered when Failures reaches max_deliver.
type RetryingEvent struct {
	Consumer     string    `json:"consumer"`
	Source       string    `json:"source"`
	EventID      string    `json:"event_id"`
	StreamSeq    uint64    `json:"stream_seq"`
	Failures     int       `json:"failures"`
	LastError    string    `json:"last_error"`
	LastFailedAt time.Time `json:"last_failed_at"`
	// PostponedSince: its handler postponed it (it waits for a later
	// event of its key) first then.
	PostponedSince *time.Time `json:"postponed_since,omitempty"`
}

// ConsumerStatus is one durable consumer. Retrying counts its events
// failing right now (Redelivered counts redeliveries of any cause).
type ConsumerStatus struct {
	Name         string `json:"name"`
	Stream       string `json:"stream"`
	Pending      uint64 `json:"pending"`
	AckPending   int    `json:"ack_pending"`
	Redelivered  int    `json:"redelivered"`
	Retrying     int64  `json:"retrying"`
	DeliveredSeq uint64 `json:"delivered_seq"`
	// AckFloorSeq is the sequence up to which every message is acked;
	// OldestUnackedAgeSeconds the age of the oldest message not acked
	// yet (0: none). A keyed consumer's are those of its durables
	// together (docs/OPERATIONS.md, "Status").
	AckFloorSeq             uint64  `json:"ack_floor_seq"`
	OldestUnackedAgeSeconds float64 `json:"oldest_unacked_age_seconds"`
	Paused                  bool    `json:"paused"`
	// Orphaned marks a durable on HOOKS no configured consumer owns.
	Orphaned bool `json:"orphaned"`
	// Partitions are a keyed consumer's partition durables (the counts
	// above include theirs) and Members the instances serving them; both
	// absent for a consumer without an ordering key.
	Partitions []PartitionStatus `json:"partitions,omitempty"`
	Members    []MemberStatus    `json:"members,omitempty"`
}

// PartitionStatus is one partition of a keyed consumer.
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

// OutboxStatus counts the outbox rows.
type OutboxStatus struct {
	Pending                 int64   `json:"pending"`
	Dead                    int64   `json:"dead"`
	Sent                    int64   `json:"sent"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// deadLetterView is a dead letter in the API.
type deadLetterView struct {
	ID             int64      `json:"id"`
	Consumer       string     `json:"consumer"`
	Source         string     `json:"source"`
	EventID        string     `json:"event_id"`
	EventType      string     `json:"event_type"`
	Subject        string     `json:"subject"`
	StreamSeq      uint64     `json:"stream_seq"`
	Deliveries     int        `json:"deliveries"`
	Reason         string     `json:"reason"`
	LastError      string     `json:"last_error"`
	DeadAt         time.Time  `json:"dead_at"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	Resolution     *string    `json:"resolution"`
	ResolutionNote *string    `json:"resolution_note,omitempty"`
	// OrderingKey is the event's ordering key (null: its source has
	// none). PassedBy is the later event of that key that applied after
	// it (null: none has): requeueing it then applies it out of order,
	// which needs {"out_of_order": true}.
	OrderingKey *string       `json:"ordering_key"`
	PassedBy    *ops.PassedBy `json:"passed_by"`
}

func viewDeadLetter(d ops.DeadLetter) deadLetterView {
	return deadLetterView{
		ID: d.ID, Consumer: d.Consumer, Source: d.Source, EventID: d.EventID, EventType: d.EventType, Subject: d.Subject,
		StreamSeq: d.StreamSeq, Deliveries: d.Deliveries, Reason: d.Reason, LastError: d.LastError, DeadAt: d.DeadAt.UTC(),
		ResolvedAt: utc(d.ResolvedAt), Resolution: nonEmpty(d.Resolution), ResolutionNote: nonEmpty(d.ResolutionNote),
		OrderingKey: nonEmpty(d.OrderingKey), PassedBy: ops.Passed(d),
	}
}

type outboxView struct {
	ID            int64     `json:"id"`
	EventID       string    `json:"event_id"`
	Subject       string    `json:"subject"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	CreatedAt     time.Time `json:"created_at"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
}

func viewOutbox(o ops.OutboxRow) outboxView {
	return outboxView{ID: o.ID, EventID: o.EventID, Subject: o.Subject, Attempts: o.Attempts, LastError: o.LastError,
		CreatedAt: o.CreatedAt.UTC(), NextAttemptAt: o.NextAttemptAt.UTC()}
}

// bodyText is a body as text when it is UTF-8 (nil otherwise), and
// bodyBase64 the same body as bytes (base64 in JSON) when it is not.
func bodyText(b []byte) *string {
	if b == nil || !utf8.Valid(b) {
		return nil
	}
	s := string(b)
	return &s
}

func bodyBase64(b []byte) []byte {
	if b == nil || utf8.Valid(b) {
		return nil
	}
	return b
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
