package ops

import (
	"encoding/hex"
	"strconv"
	"time"
	"unicode/utf8"
)

// The operator views: one JSON shape per thing, which the command line
// (--json) and the admin API both print and the console reads. Hashes
// are hex, an unknown sequence is 0, times are UTC, and a body is text
// when it is UTF-8 and base64 (a _base64 key) when it is not.

// Page is one page of a listing, newest first: the JSON of `hookbridge
// dead-letters|conflicts|outbox list --json` and of the admin API's list
// endpoints. NextCursor, nil on the last page, selects the next page
// (--cursor, ?cursor=).
type Page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// newPage pages items whose last id is lastID: a full page has a next
// cursor.
func newPage[T any](items []T, limit int, lastID int64) Page[T] {
	out := Page[T]{Items: items}
	if out.Items == nil {
		out.Items = []T{}
	}
	if len(items) == limit && lastID > 0 {
		c := strconv.FormatInt(lastID, 10)
		out.NextCursor = &c
	}
	return out
}

// DeadLetterView is a dead letter as every operator view shows it.
type DeadLetterView struct {
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
	// which needs the operator to say so.
	OrderingKey *string   `json:"ordering_key"`
	PassedBy    *PassedBy `json:"passed_by"`
}

// ViewDeadLetter is d as operators see it.
func ViewDeadLetter(d DeadLetter) DeadLetterView {
	return DeadLetterView{
		ID: d.ID, Consumer: d.Consumer, Source: d.Source, EventID: d.EventID, EventType: d.EventType, Subject: d.Subject,
		StreamSeq: d.StreamSeq, Deliveries: d.Deliveries, Reason: d.Reason, LastError: d.LastError, DeadAt: d.DeadAt.UTC(),
		ResolvedAt: utcPtr(d.ResolvedAt), Resolution: nonEmpty(d.Resolution), ResolutionNote: nonEmpty(d.ResolutionNote),
		OrderingKey: nonEmpty(d.OrderingKey), PassedBy: Passed(d),
	}
}

// DeadLetterWithBody is one dead letter shown with its body: `hookbridge
// dead-letters show --json` and GET /api/v1/dead-letters/{id}.
type DeadLetterWithBody struct {
	DeadLetterView
	Body       *string `json:"body,omitempty"`
	BodyBase64 []byte  `json:"body_base64,omitempty"`
}

// RawBody is the body's bytes.
func (d DeadLetterWithBody) RawBody() []byte { return rawBody(d.Body, d.BodyBase64) }

// ConflictView is a conflict as every operator view shows it.
type ConflictView struct {
	ID             int64      `json:"id"`
	DetectedBy     string     `json:"detected_by"` // "ingress" or a consumer name
	Source         string     `json:"source"`
	EventID        string     `json:"event_id"`
	EventType      string     `json:"event_type"`
	OriginalSHA256 string     `json:"original_sha256,omitempty"`
	OriginalSeq    uint64     `json:"original_seq"`
	RejectedSHA256 string     `json:"rejected_sha256"`
	RejectedSeq    uint64     `json:"rejected_seq"` // 0: the ingress refused it, nothing was stored
	DetectedAt     time.Time  `json:"detected_at"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	Resolution     *string    `json:"resolution"`
}

// ViewConflict is c as operators see it.
func ViewConflict(c Conflict) ConflictView {
	return ConflictView{
		ID: c.ID, DetectedBy: c.DetectedBy, Source: c.Source, EventID: c.EventID, EventType: c.EventType,
		OriginalSHA256: hex.EncodeToString(c.OriginalSHA256), OriginalSeq: uint64(c.OriginalSeq),
		RejectedSHA256: hex.EncodeToString(c.RejectedSHA256), RejectedSeq: uint64(c.RejectedSeq),
		DetectedAt: c.DetectedAt.UTC(), ResolvedAt: utcPtr(c.ResolvedAt), Resolution: nonEmpty(c.Resolution),
	}
}

// ConflictWithBodies is one conflict shown with both bodies: `hookbridge
// conflicts show --json` and GET /api/v1/conflicts/{id}. The original is
// read back from HOOKS: null while it cannot be, and OriginalMissing
// says why.
type ConflictWithBodies struct {
	ConflictView
	OriginalBody       *string `json:"original_body"`
	OriginalBodyBase64 []byte  `json:"original_body_base64,omitempty"`
	OriginalMissing    string  `json:"original_missing,omitempty"`
	RejectedBody       *string `json:"rejected_body"`
	RejectedBodyBase64 []byte  `json:"rejected_body_base64,omitempty"`
}

// RawOriginal is the original body's bytes (nil while it is missing).
func (c ConflictWithBodies) RawOriginal() []byte {
	return rawBody(c.OriginalBody, c.OriginalBodyBase64)
}

// RawRejected is the rejected body's bytes.
func (c ConflictWithBodies) RawRejected() []byte {
	return rawBody(c.RejectedBody, c.RejectedBodyBase64)
}

// OutboxView is an outbox row as every operator view lists it (no
// payload).
type OutboxView struct {
	ID            int64     `json:"id"`
	EventID       string    `json:"event_id"`
	Subject       string    `json:"subject"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	CreatedAt     time.Time `json:"created_at"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
}

// bodyText is b as text when it is UTF-8 (nil otherwise, and for nil).
func bodyText(b []byte) *string {
	if b == nil || !utf8.Valid(b) {
		return nil
	}
	s := string(b)
	return &s
}

// bodyBase64 is b as bytes, base64 in JSON, when it is not UTF-8.
func bodyBase64(b []byte) []byte {
	if b == nil || utf8.Valid(b) {
		return nil
	}
	return b
}

func rawBody(text *string, b []byte) []byte {
	if text != nil {
		return []byte(*text)
	}
	return b
}

// nonEmpty is s, nil when it is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
