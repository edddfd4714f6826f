package admin

import (
	"time"
	"unicode/utf8"

	"github.com/hookbridge/hookbridge/internal/ops"
)

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
