package ops

import (
	"encoding/hex"
	"time"
)

// ConflictView is a conflict as every operator view shows it: the JSON of
// `hookbridge conflicts list --json` and of the admin API's
// /api/v1/conflicts is this one shape. Hashes are hex, an unknown
// sequence is 0, times are UTC.
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
	v := ConflictView{
		ID: c.ID, DetectedBy: c.DetectedBy, Source: c.Source, EventID: c.EventID, EventType: c.EventType,
		OriginalSHA256: hex.EncodeToString(c.OriginalSHA256), OriginalSeq: uint64(c.OriginalSeq),
		RejectedSHA256: hex.EncodeToString(c.RejectedSHA256), RejectedSeq: uint64(c.RejectedSeq),
		DetectedAt: c.DetectedAt.UTC(),
	}
	if c.ResolvedAt != nil {
		t := c.ResolvedAt.UTC()
		v.ResolvedAt = &t
	}
	if c.Resolution != "" {
		r := c.Resolution
		v.Resolution = &r
	}
	return v
}
