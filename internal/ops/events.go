package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// The states of one event at one consumer in its [EventLife].
const (
	EventProcessed    = "processed"     // the inbox holds it from this message
	EventDuplicate    = "duplicate"     // the inbox holds it from another copy
	EventConflict     = "conflict"      // a copy came with another body
	EventPending      = "pending"       // stored, not delivered or not yet acked
	EventRedelivered  = "redelivered"   // failing right now, being retried
	EventPostponed    = "postponed"     // its handler waits for a later event of its key
	EventDeadLettered = "dead_lettered" // given up on (or discarded); see the dead letter
)

// recentScan is how many of the newest HOOKS messages an event lookup
// reads (headers only) when no table names the event's sequence: an
// event that no consumer has settled yet is almost always a recent one.
const recentScan = 10000

// StoredMessage is where HOOKS keeps one event.
type StoredMessage struct {
	Stream     string    `json:"stream"`
	Seq        uint64    `json:"seq"`
	Subject    string    `json:"subject"`
	ReceivedAt time.Time `json:"received_at"`
}

// EventAtConsumer is what one consumer did with an event. While it is
// redelivered after failures, Failures counts those that count toward
// max_deliver, with the last one's error and time; a postponed one
// (state postponed: its last attempt postponed, failures before or not)
// has PostponedSince too.
type EventAtConsumer struct {
	Name         string     `json:"name"`
	State        string     `json:"state"`
	StreamSeq    uint64     `json:"stream_seq"`
	ProcessedAt  *time.Time `json:"processed_at"`
	DeadLetterID *int64     `json:"dead_letter_id"`
	Failures     int        `json:"failures,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	LastFailedAt *time.Time `json:"last_failed_at,omitempty"`
	// PostponedSince is when its handler first postponed it (state
	// postponed: it waits for a later event of its key).
	PostponedSince *time.Time `json:"postponed_since,omitempty"`
}

// LifeDeadLetter is a dead letter of the event, resolved or not.
type LifeDeadLetter struct {
	ID         int64      `json:"id"`
	Consumer   string     `json:"consumer"`
	StreamSeq  uint64     `json:"stream_seq"`
	ResolvedAt *time.Time `json:"resolved_at"`
	Resolution string     `json:"resolution,omitempty"`
}

// LifeConflict is a conflict recorded for the event's id, resolved or
// not.
type LifeConflict struct {
	ID          int64      `json:"id"`
	DetectedBy  string     `json:"detected_by"`
	RejectedSeq uint64     `json:"rejected_seq,omitempty"`
	DetectedAt  time.Time  `json:"detected_at"`
	ResolvedAt  *time.Time `json:"resolved_at"`
	Resolution  string     `json:"resolution,omitempty"`
}

// EventOutbox is one outbox row an apply of the event wrote.
type EventOutbox struct {
	ID      int64  `json:"id"`
	EventID string `json:"event_id"`
	Subject string `json:"subject"`
	State   string `json:"state"` // pending, sent or dead
	SentSeq uint64 `json:"sent_seq"`
}

// EventLife is the whole life of one event: stored in HOOKS, its outcome
// at each consumer, its dead letters and conflicts (resolved ones too:
// they are its history), the outbox rows its applies wrote and whether
// the relay published them.
type EventLife struct {
	Source      string            `json:"source"`
	EventID     string            `json:"event_id"`
	Stored      *StoredMessage    `json:"stored"`
	Consumers   []EventAtConsumer `json:"consumers"`
	DeadLetters []LifeDeadLetter  `json:"dead_letters"`
	Conflicts   []LifeConflict    `json:"conflicts"`
	Outbox      []EventOutbox     `json:"outbox"`
	// Deliveries are, for each of its outbox rows the relay published,
	// that event's delivery history per endpoint.
	Deliveries []DeliveryHistory `json:"deliveries"`
}

// EventLife follows one event through the deployment. The outbox rows are
// found by the id convention of [publisher.DerivedID]. It answers
// [ErrNotFound] when neither HOOKS nor any table knows the event.
func (o *Ops) EventLife(ctx context.Context, source, eventID string) (EventLife, error) {
	life := EventLife{Source: source, EventID: eventID, Consumers: []EventAtConsumer{}, DeadLetters: []LifeDeadLetter{},
		Conflicts: []LifeConflict{}, Outbox: []EventOutbox{}, Deliveries: []DeliveryHistory{}}
	names := o.consumerNames()
	inbox, err := store.InboxListForEvent(ctx, o.Pool, names, source, eventID)
	if err != nil {
		return life, fmt.Errorf("event %s/%s: inbox: %w", source, eventID, err)
	}
	dead, err := store.DeadLetterListForEvent(ctx, o.Pool, names, source, eventID)
	if err != nil {
		return life, fmt.Errorf("event %s/%s: dead letters: %w", source, eventID, err)
	}
	failing, err := store.FailureListForEvent(ctx, o.Pool, names, source, eventID)
	if err != nil {
		return life, fmt.Errorf("event %s/%s: delivery failures: %w", source, eventID, err)
	}
	conflicts, err := store.ConflictListForEvent(ctx, o.Pool, append(slices.Clone(names), engine.IngressConflictDetector), source, eventID)
	if err != nil {
		return life, fmt.Errorf("event %s/%s: conflicts: %w", source, eventID, err)
	}
	var seqs []uint64
	for _, a := range inbox {
		seqs = append(seqs, a.StreamSeq)
	}
	for _, d := range dead {
		seqs = append(seqs, d.StreamSeq)
	}
	for _, f := range failing {
		seqs = append(seqs, f.StreamSeq)
	}
	eventType := ""
	if o.JS != nil {
		var msgType string
		life.Stored, msgType, err = o.findStored(ctx, source, eventID, seqs)
		if err != nil {
			return life, err
		}
		eventType = msgType
	}
	for _, c := range o.Consumers {
		at, ok := o.atConsumer(ctx, c, source, life.Stored, eventType, inbox, dead, failing, conflicts)
		if ok {
			life.Consumers = append(life.Consumers, at)
		}
	}
	for _, d := range dead {
		life.DeadLetters = append(life.DeadLetters, LifeDeadLetter{ID: d.ID, Consumer: d.Consumer, StreamSeq: d.StreamSeq,
			ResolvedAt: utcPtr(d.ResolvedAt), Resolution: d.Resolution})
	}
	for _, x := range conflicts {
		life.Conflicts = append(life.Conflicts, LifeConflict{ID: x.ID, DetectedBy: x.DetectedBy, RejectedSeq: uint64(x.RejectedSeq),
			DetectedAt: x.DetectedAt.UTC(), ResolvedAt: utcPtr(x.ResolvedAt), Resolution: x.Resolution})
	}
	for _, a := range inbox {
		row, err := store.OutboxGetByEventID(ctx, o.Pool, publisher.DerivedID(a.Consumer, source, eventID))
		if err != nil {
			continue // none written under the convention (or not readable)
		}
		life.Outbox = append(life.Outbox, EventOutbox{ID: row.ID, EventID: row.EventID, Subject: row.Subject, State: row.Status, SentSeq: row.StreamSeq})
		h, err := o.DeliveryHistory(ctx, row.EventID)
		if err != nil {
			return life, fmt.Errorf("event %s/%s: %w", source, eventID, err)
		}
		if len(h.Endpoints) > 0 {
			life.Deliveries = append(life.Deliveries, h)
		}
	}
	if life.Stored == nil && len(inbox) == 0 && len(dead) == 0 && len(failing) == 0 && len(conflicts) == 0 {
		return life, fmt.Errorf("event %s/%s: %w", source, eventID, ErrNotFound)
	}
	return life, nil
}

// atConsumer is the event's state at consumer c; false when c has nothing
// to do with the event.
func (o *Ops) atConsumer(ctx context.Context, c Consumer, source string, stored *StoredMessage, eventType string, inbox []store.InboxApply,
	dead []store.EventDeadLetter, failing []store.EventFailure, conflicts []store.Conflict) (EventAtConsumer, bool) {
	at := EventAtConsumer{Name: c.Name}
	for _, x := range conflicts {
		if x.DetectedBy == c.Name && x.ResolvedAt == nil {
			at.State, at.StreamSeq = EventConflict, uint64(x.RejectedSeq)
			return at, true
		}
	}
	for _, a := range inbox {
		if a.Consumer == c.Name {
			at.State, at.StreamSeq = EventProcessed, a.StreamSeq
			applied := a.AppliedAt.UTC()
			at.ProcessedAt = &applied
			if stored != nil && stored.Seq != a.StreamSeq {
				at.State, at.StreamSeq = EventDuplicate, stored.Seq
			}
			return at, true
		}
	}
	for i := len(dead) - 1; i >= 0; i-- {
		if d := dead[i]; d.Consumer == c.Name && d.ResolvedAt == nil {
			id := d.ID
			at.State, at.StreamSeq, at.DeadLetterID = EventDeadLettered, d.StreamSeq, &id
			return at, true
		}
	}
	for _, f := range failing {
		if f.Consumer == c.Name {
			at.State, at.StreamSeq = EventRedelivered, f.StreamSeq
			failed := f.UpdatedAt.UTC()
			at.Failures, at.LastError, at.LastFailedAt = f.Failures, f.LastError, &failed
			if f.PostponedSince != nil {
				// Postponed at its last attempt, whether it failed before
				// or not: it waits for a later event of its key, as
				// status lists it. (A failure ends a postponement.)
				at.State, at.PostponedSince = EventPostponed, utcPtr(f.PostponedSince)
			}
			return at, true
		}
	}
	// An operator discarded it: given up on for good, and never applied
	// (a requeued or replayed one has its inbox row above). Without this
	// the event would look pending, or, once the consumer's ack floor is
	// past its terminated message, not concern the consumer at all.
	for i := len(dead) - 1; i >= 0; i-- {
		if d := dead[i]; d.Consumer == c.Name && d.Resolution == engine.ResolutionDiscarded {
			id := d.ID
			at.State, at.StreamSeq, at.DeadLetterID = EventDeadLettered, d.StreamSeq, &id
			return at, true
		}
	}
	if stored == nil || !c.receives(source, eventType) {
		return at, false
	}
	at.State, at.StreamSeq = EventPending, stored.Seq
	if o.JS != nil {
		// The durable that receives the message: a keyed message's is its
		// partition's, whose ack floor is the one that says whether the
		// consumer has settled it (the consumer's own durable acks only
		// unkeyed messages).
		durable := c.Name
		if _, _, p, ok := stream.SplitHookSubject(stored.Subject); ok && p >= 0 {
			durable = stream.PartitionDurable(c.Name, p)
		}
		if info, err := o.JS.Consumer(ctx, stream.Hooks, durable); err == nil && info.CachedInfo().AckFloor.Stream >= stored.Seq {
			// Acked without an inbox row: the consumer does not take
			// this event (its type), or a retention run deleted the row.
			return at, false
		}
	}
	return at, true
}

// findStored finds the event in HOOKS: at one of seqs when a table named
// its sequence, else among the newest messages of its source. It returns
// the event's type as the message carries it.
func (o *Ops) findStored(ctx context.Context, source, eventID string, seqs []uint64) (*StoredMessage, string, error) {
	s, err := o.JS.Stream(ctx, stream.Hooks)
	if err != nil {
		return nil, "", fmt.Errorf("event %s/%s: stream %s: %w", source, eventID, stream.Hooks, err)
	}
	slices.Sort(seqs)
	for _, seq := range slices.Compact(seqs) {
		raw, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("event %s/%s: read seq %d: %w", source, eventID, seq, err)
		}
		if raw.Header.Get(stream.HeaderSource) == source && raw.Header.Get(stream.HeaderEventID) == eventID {
			return storedMessage(raw.Sequence, raw.Subject, raw.Header.Get(stream.HeaderReceivedAt), raw.Time),
				msgType(raw.Header), nil
		}
	}
	return o.scanRecent(ctx, s, source, eventID)
}

func (o *Ops) scanRecent(ctx context.Context, s jetstream.Stream, source, eventID string) (*StoredMessage, string, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("event %s/%s: stream info: %w", source, eventID, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || last == 0 {
		return nil, "", nil
	}
	start := max(info.State.FirstSeq, 1)
	if last > recentScan && last-recentScan+1 > start {
		start = last - recentScan + 1
	}
	cons, err := o.JS.OrderedConsumer(ctx, stream.Hooks, jetstream.OrderedConsumerConfig{
		// A source with an ordering key stores its messages on
		// "hookp.<partition>.<source>.<type>", the others on
		// "hooks.<source>.<type>" (and a source that gained or lost its
		// key has both).
		FilterSubjects: sourceSubjects(source),
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
		HeadersOnly: true, InactiveThreshold: time.Minute, NamePrefix: "hookbridge_replay_lookup",
	})
	if err != nil {
		return nil, "", fmt.Errorf("event %s/%s: read stream: %w", source, eventID, err)
	}
	if ci := cons.CachedInfo(); ci != nil {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = o.JS.DeleteConsumer(dctx, stream.Hooks, ci.Name) // best effort: it expires anyway
		}()
		if ci.NumPending == 0 {
			return nil, "", nil
		}
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, "", fmt.Errorf("event %s/%s: read stream: %w", source, eventID, err)
	}
	defer it.Stop()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		msg, err := it.Next(jetstream.NextContext(sctx))
		if err != nil {
			if sctx.Err() != nil && ctx.Err() == nil {
				return nil, "", nil // the scan is a best effort
			}
			return nil, "", fmt.Errorf("event %s/%s: read stream: %w", source, eventID, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, "", fmt.Errorf("event %s/%s: message metadata: %w", source, eventID, err)
		}
		h := msg.Headers()
		if h.Get(stream.HeaderEventID) == eventID && h.Get(stream.HeaderSource) == source {
			return storedMessage(md.Sequence.Stream, msg.Subject(), h.Get(stream.HeaderReceivedAt), md.Timestamp),
				msgType(h), nil
		}
		if md.Sequence.Stream >= last || md.NumPending == 0 {
			return nil, "", nil
		}
	}
}

// sourceSubjects are the HOOKS filter subjects of every message of
// source, keyed or not.
func sourceSubjects(source string) []string {
	return []string{stream.HooksRoot + "." + source + ".>", stream.HooksKeyedRoot + ".*." + source + ".>"}
}

// utcPtr is t in UTC, nil when t is.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func storedMessage(seq uint64, subject, receivedHeader string, stored time.Time) *StoredMessage {
	at := stored
	if t, err := time.Parse(time.RFC3339Nano, receivedHeader); err == nil {
		at = t
	}
	return &StoredMessage{Stream: stream.Hooks, Seq: seq, Subject: subject, ReceivedAt: at.UTC()}
}

// msgType is the event type a message's headers carry ("" when unreadable).
func msgType(h nats.Header) string {
	t, ok := stream.TypeFromHeader(h.Get(stream.HeaderEventType), h.Get(stream.HeaderEventTypeEncoding))
	if !ok {
		return ""
	}
	return t
}
