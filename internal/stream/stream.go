// Package stream is the shared JetStream vocabulary of hookbridge: stream
// and subject names, header names and the stream configurations. Every
// other package takes these names from here so they are defined once.
package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream names and subject roots.
const (
	// Hooks holds verified incoming webhooks, subjects "hooks.<source>.<type>"
	// and, for sources with an ordering key, "hookp.<partition>.<source>.<type>"
	// (partition.go).
	Hooks = "HOOKS"
	// HooksRoot is the first subject token of [Hooks].
	HooksRoot = "hooks"
	// Events holds events relayed from the outbox, subjects "events.>".
	Events = "EVENTS"
	// EventsRoot is the first subject token of [Events].
	EventsRoot = "events"
	// Conflicts holds deliveries the ingress refused because their id was
	// already stored with a different body; a recorder writes them to
	// Postgres. Keeping them in JetStream first lets the ingress stay
	// independent of Postgres and still never drop a conflict.
	Conflicts = "HOOKS_CONFLICTS"
	// ConflictsRoot is the first subject token of [Conflicts].
	ConflictsRoot = "conflicts"
)

// Header names carried on every message in [Hooks].
const (
	HeaderMsgID      = jetstream.MsgIDHeader // "Nats-Msg-Id"
	HeaderSource     = "Hookbridge-Source"
	HeaderEventID    = "Hookbridge-Event-Id"
	HeaderEventType  = "Hookbridge-Event-Type"
	HeaderBodySHA256 = "Hookbridge-Body-Sha256" // lowercase hex
	HeaderReceivedAt = "Hookbridge-Received-At" // RFC 3339 with nanoseconds
	// HeaderOriginalSeq is set on a conflict message: the [Hooks] sequence
	// of the original delivery it collided with.
	HeaderOriginalSeq = "Hookbridge-Original-Seq"
	// HeaderOriginalSHA256 is set on a conflict message: the body hash of
	// the original delivery.
	HeaderOriginalSHA256 = "Hookbridge-Original-Sha256"
	// HeaderContentType is the media type of the delivery's body as the
	// sender declared it ("application/json",
	// "application/x-www-form-urlencoded"), lower case, without
	// parameters; absent when the sender declared none.
	HeaderContentType = "Hookbridge-Content-Type"
	// HeaderUnkeyed is set on every unkeyed delivery. For a source with an
	// ordering key that carried no key the ingress could read, it says why
	// ("absent" or "unreadable"): such a message is the source's own, not
	// one from before the source had its key. For a source without a key
	// it is [UnkeyedKeyOff]: such a message is from before the key, which
	// a consumer's partitions wait for when they start once the source has
	// one (docs/DESIGN.md, "Order").
	HeaderUnkeyed = "Hookbridge-Unkeyed"
	// UnkeyedKeyOff is [HeaderUnkeyed] on a delivery of a source that had
	// no ordering key when it was accepted.
	UnkeyedKeyOff = "off"
)

// Defaults for the streams' limits.
const (
	// DefaultDuplicateWindow is how long JetStream remembers a message id
	// (on HOOKS and on EVENTS). Every id in the window costs nats-server
	// about 125 bytes of live heap (BenchmarkDuplicateWindowMemory), 250–600
	// bytes of RSS with Go's GC headroom: at 1,000 events/s a 10-minute
	// window held 600,000 ids per stream, some 75 MB of heap and several
	// hundred MB of RSS, growing with the rate. Two minutes covers the
	// repeats that come fast (a lost answer, a sender's timeout and
	// retry); a later repeat is stored a second time and the consumer's
	// inbox answers it as a duplicate or a conflict, so a shorter window
	// costs only a stored duplicate, never a second effect.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultHooksMaxAge is how long HOOKS keeps a message every consumer
	// has applied: how far back a replay reaches. A message some consumer
	// has not applied stays, however old (docs/DESIGN.md, "Stream
	// limits"). Three days cover a weekend and the providers' own
	// redelivery windows (GitHub 3 days, Stripe's automatic retries 3
	// days, Shopify 48 h); at about 530 bytes per message that is ~137 GB
	// per 1,000 events/s, unless the byte bound trims applied messages
	// sooner.
	DefaultHooksMaxAge = 72 * time.Hour
	// HooksStoreShare is the share of the JetStream store HOOKS's default
	// byte bound takes. The other half is for EVENTS and HOOKS_CONFLICTS
	// and for the store's own room to work (block compaction, snapshots
	// for a replica catching up): HOOKS then fills up, and answers 503
	// with its own reason, before the server's store does, which would
	// refuse every stream at once, EVENTS included.
	HooksStoreShare = 0.5
	// FallbackHooksMaxBytes is HOOKS's default byte bound when the
	// store's size is not known (an external server that sets no account
	// limit): 10 GiB, some 20 million messages of ~530 bytes, two days of
	// backlog at 100 events/s.
	FallbackHooksMaxBytes int64 = 10 << 30
	// EventsStoreShare is the share of the JetStream store EVENTS's
	// default byte bound takes when delivery endpoints read it: with
	// HOOKS's half, a quarter is left for HOOKS_CONFLICTS and the store's
	// own room to work, so EVENTS fills up and the relay waits before the
	// server's store refuses HOOKS too.
	EventsStoreShare = 0.25
	// FallbackEventsMaxBytes is EVENTS's default byte bound, when delivery
	// endpoints read it, where the store's size is not known: 5 GiB.
	FallbackEventsMaxBytes int64 = 5 << 30
)

// MsgID is the JetStream de-duplication id of a webhook: the event id
// qualified by its source so two providers' ids cannot collide.
func MsgID(source, eventID string) string { return source + ":" + eventID }

// HookSubject is the subject a verified webhook is published on. The
// event type is the provider's spelling, mapped to tokens by
// [TypeSubject] ("order.created" stays as it is, each part a token).
func HookSubject(source, eventType string) string {
	return HooksRoot + "." + source + "." + TypeSubject(eventType)
}

// HookFilter is the filter subject matching eventType (the provider's
// spelling, mapped like [HookSubject] maps it) from one source, or from
// every source when source is "" or "*".
func HookFilter(source, eventType string) string {
	if source == "" {
		source = "*"
	}
	return HooksRoot + "." + source + "." + TypeSubject(eventType)
}

// ConflictSubject is the subject of a conflict recorded by the ingress.
func ConflictSubject(source string) string { return ConflictsRoot + "." + source }

// ValidName reports whether s is safe as a source name: one subject token
// of letters, digits, '-' and '_'.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// ValidEventType reports whether s can be published as the tail of a
// subject: dot-separated parts, each a [ValidName]-like token. Wildcards,
// whitespace, empty parts and control characters are refused, so an event
// type can never make the ingress publish to an unintended subject.
func ValidEventType(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if !ValidName(part) {
			return false
		}
	}
	return true
}

// ValidEventID reports whether s is acceptable as an event id: 1–255
// printable ASCII characters without spaces. Ids are header values and
// database keys, never subject tokens.
func ValidEventID(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Options tune the streams hookbridge creates.
type Options struct {
	Replicas        int           // 0 = 1
	DuplicateWindow time.Duration // 0 = DefaultDuplicateWindow
	// MaxAge (0 = DefaultHooksMaxAge) is HOOKS's horizon for applied
	// messages, and HOOKS_CONFLICTS's for recorded conflicts, which the
	// storage guard enforces (see [HooksConfig], [ConflictsConfig]);
	// EVENTS deletes messages older than it.
	MaxAge time.Duration
	// MaxBytes bounds HOOKS and EVENTS: 0 gives HOOKS [Options.HooksMaxBytes]'s
	// default and leaves EVENTS unlimited; negative is unlimited.
	MaxBytes int64
	// StoreMax is the JetStream storage the server gives this account
	// (0: not known); HOOKS's default byte bound is a share of it.
	StoreMax int64
	// Partitions is recorded on a HOOKS stream that records none yet
	// (0 = DefaultPartitions); see [CheckPartitions].
	Partitions int
	// Delivery: delivery endpoints read EVENTS. Then EVENTS keeps what an
	// endpoint has not received, like HOOKS: no JetStream max age, a byte
	// bound by default ([Options.EventsMaxBytes]), and the storage guard
	// deletes only what every endpoint has received ([EventsConfig]).
	Delivery bool
	// EventsAge, when set, is a JetStream max age for EVENTS, which then
	// deletes older events whether every endpoint received them or not
	// (the operator's explicit choice); 0 = [Options.EventsMaxAge]'s
	// default.
	EventsAge time.Duration
}

func (o Options) partitions() int {
	if o.Partitions <= 0 {
		return DefaultPartitions
	}
	return o.Partitions
}

func (o Options) replicas() int {
	if o.Replicas <= 0 {
		return 1
	}
	return o.Replicas
}

func (o Options) window() time.Duration {
	if o.DuplicateWindow <= 0 {
		return DefaultDuplicateWindow
	}
	return o.DuplicateWindow
}

func (o Options) maxAge() time.Duration {
	if o.MaxAge <= 0 {
		return DefaultHooksMaxAge
	}
	return o.MaxAge
}

func (o Options) maxBytes() int64 {
	if o.MaxBytes <= 0 {
		return -1
	}
	return o.MaxBytes
}

// HooksMaxAge is how long HOOKS keeps a message every consumer has
// applied (the replay horizon).
func (o Options) HooksMaxAge() time.Duration { return o.maxAge() }

// HooksMaxBytes is HOOKS's byte bound (-1: none): MaxBytes when set,
// else [HooksStoreShare] of StoreMax, else [FallbackHooksMaxBytes].
func (o Options) HooksMaxBytes() int64 {
	switch {
	case o.MaxBytes < 0:
		return -1
	case o.MaxBytes > 0:
		return o.MaxBytes
	case o.StoreMax > 0:
		return int64(HooksStoreShare * float64(o.StoreMax))
	}
	return FallbackHooksMaxBytes
}

// EventsMaxBytes is EVENTS's byte bound (-1: none). Without delivery
// endpoints it is MaxBytes when set, else none. With them, MaxBytes when
// set, else [EventsStoreShare] of StoreMax, else [FallbackEventsMaxBytes]:
// a full EVENTS refuses the relay's publishes (the rows wait in the
// outbox) rather than growing until the server's store refuses every
// stream.
func (o Options) EventsMaxBytes() int64 {
	switch {
	case o.MaxBytes < 0:
		return -1
	case o.MaxBytes > 0:
		return o.MaxBytes
	case !o.Delivery:
		return -1
	case o.StoreMax > 0:
		return int64(EventsStoreShare * float64(o.StoreMax))
	}
	return FallbackEventsMaxBytes
}

// EventsMaxAge is EVENTS's JetStream max age: EventsAge when set, else
// [Options.HooksMaxAge] without delivery endpoints, and none with them,
// whose storage guard trims by that age only what every endpoint has
// received.
func (o Options) EventsMaxAge() time.Duration {
	switch {
	case o.EventsAge > 0:
		return o.EventsAge
	case o.Delivery:
		return 0
	}
	return o.maxAge()
}

// HooksConfig is the configuration of the [Hooks] stream. Retention is
// limits-based (age/size), never work-queue: replays re-read the stream.
//
// A full stream refuses new messages (DiscardNew) instead of deleting its
// oldest ones: those may not have been applied yet, and every message in
// HOOKS was answered 202, so deleting it would lose an accepted webhook
// without a trace. A refused publish is answered 503 with Retry-After and
// the sender retries; the message is then stored once there is room.
// For the same reason HOOKS has no JetStream max age, which deletes
// messages by age whether applied or not: serve's storage guard deletes
// the messages older than [Options.HooksMaxAge] that every consumer has
// applied (see docs/DESIGN.md, "Stream limits").
func HooksConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Hooks,
		Description: "verified incoming webhooks",
		Subjects:    []string{HooksRoot + ".>", HooksKeyedRoot + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Duplicates:  o.window(),
		MaxBytes:    o.HooksMaxBytes(),
		Replicas:    o.replicas(),
		Metadata:    map[string]string{MetadataPartitions: strconv.Itoa(o.partitions())},
		// No direct gets: the ingress reads a duplicate's original right
		// after the PubAck, and a direct get may be answered by a replica
		// that has not stored it yet. Reads go through the leader.
		AllowDirect: false,
	}
}

// ConflictsConfig is the configuration of the [Conflicts] stream. Like
// [Hooks] it refuses new messages when full rather than dropping
// conflicts the recorder has not written to Postgres yet; the ingress then
// answers the conflicting delivery 503 and the sender retries.
//
// Like HOOKS it has no JetStream max age: that would delete a conflict
// the recorder has not written to Postgres yet once Postgres has been
// unreachable for longer than it (3 days by default), and the ingress
// answered that delivery 409 on the promise that it is recorded. serve's
// storage guard deletes the conflicts older than [Options.HooksMaxAge]
// that the recorder has acked, and only those. MaxAge is set to 0
// explicitly: an update of a stream created with a max age removes it.
func ConflictsConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Conflicts,
		Description: "deliveries refused by the ingress as id conflicts",
		Subjects:    []string{ConflictsRoot + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Duplicates:  o.window(),
		MaxAge:      0,
		Replicas:    o.replicas(),
	}
}

// EventsConfig is the configuration of the outgoing [Events] stream. A
// full stream refuses new messages, so an event that downstream consumers
// have not read yet is never deleted to make room: the relay's publish
// fails and the outbox row stays pending until there is room again.
// With delivery endpoints ([Options.Delivery]) it has no JetStream max
// age either, which would delete an event a disabled or failing endpoint
// has not received: serve's storage guard deletes the events older than
// [Options.HooksMaxAge], or when space runs short, that every endpoint
// has received and no pending delivery reads. MaxAge is set to 0
// explicitly: an update of a stream created with a max age removes it.
func EventsConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Events,
		Description: "events relayed from the hookbridge outbox",
		Subjects:    []string{EventsRoot + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Duplicates:  o.window(),
		MaxAge:      o.EventsMaxAge(),
		MaxBytes:    o.EventsMaxBytes(),
		Replicas:    o.replicas(),
		AllowDirect: true,
	}
}

// Ensure creates the stream or updates it to cfg. A HOOKS stream keeps
// the number of partitions it records ([CheckPartitions]): a different
// one in cfg is refused.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if v, ok := cfg.Metadata[MetadataPartitions]; ok && cfg.Name == Hooks {
		n, _ := strconv.Atoi(v)
		if err := CheckPartitions(ctx, js, n); err != nil {
			return nil, err
		}
	}
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// EnsureExists creates the stream cfg names when it does not exist and
// leaves an existing one as it is. For a component that only needs the
// stream to be there (the relay): serve updates every stream's
// configuration once at start (Ensure), and an update while other
// components create consumers on the stream races them inside
// nats-server's file store.
func EnsureExists(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	_, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	_, err = Ensure(ctx, js, cfg)
	return err
}

// EnsureIngress creates the streams the ingress publishes to.
func EnsureIngress(ctx context.Context, js jetstream.JetStream, o Options) error {
	_, _, err1 := EnsureHooks(ctx, js, o)
	_, err2 := Ensure(ctx, js, ConflictsConfig(o))
	return errors.Join(err1, err2)
}
