package stream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Ordered consumption (docs/DESIGN.md, "Order").
//
// A source with an ordering key publishes to "hookp.<partition>.<source>.<type>"
// instead of "hooks.<source>.<type>". The ingress computes the partition
// from the key ([Partition]); the number of partitions is recorded on the
// HOOKS stream itself ([MetadataPartitions]) so that every ingress and
// every consumer of a deployment agree on it, whatever their own
// configuration says. Each consumer reads each partition through a
// durable of its own ([PartitionDurable]) whose priority group pins it to
// one client at a time (nats-server 2.11): one instance applies a
// partition, in stream order, and a partition moves to another instance
// only when its client stops pulling.

// HooksKeyedRoot is the first subject token of the keyed messages in
// [Hooks]. A root of its own keeps every unkeyed filter ("hooks.*.<type>")
// from matching a keyed subject, whatever the types' token counts.
const HooksKeyedRoot = "hookp"

// HeaderOrderingKey carries a keyed message's ordering key: the value as
// the sender wrote it when a NATS header carries it unchanged and it is at
// most [MaxOrderingKeyBytes], else [HashedKeyPrefix] and its SHA-256.
const HeaderOrderingKey = "Hookbridge-Ordering-Key"

// MaxOrderingKeyBytes bounds an ordering key carried verbatim.
const MaxOrderingKeyBytes = 200

// HashedKeyPrefix starts the header value of a key that is too long or
// not header-safe: "sha256:" and 64 hex digits. Keys compare equal exactly
// when their header values do (up to a hash collision).
const HashedKeyPrefix = "sha256:"

// Partition defaults and bounds.
const (
	// DefaultPartitions is the number of partitions of a new HOOKS stream:
	// enough to spread a keyed consumer over eight instances, few enough
	// that the server's writes of its durables' states stay cheap (each
	// partition of each keyed consumer is a durable whose state
	// nats-server writes up to ten times a second under load; with 16,
	// on one disk with Postgres, applied/s fell to about half the
	// unkeyed rate: docs/PERFORMANCE.md, "Ordered consumption").
	DefaultPartitions = 8
	// MaxPartitions bounds the partitions (and so the durables a keyed
	// consumer creates).
	MaxPartitions = 256
)

// MetadataPartitions is the HOOKS stream metadata key that records the
// number of partitions keyed messages are spread over.
const MetadataPartitions = "hookbridge.partitions"

// MinOrderedServer is the oldest nats-server with priority groups and
// pinned clients, which ordered consumption is built on.
const MinOrderedServer = "2.11.0"

// OrderingKeyHeader is the header value that carries key (rules at
// [HeaderOrderingKey]).
func OrderingKeyHeader(key string) string {
	if len(key) <= MaxOrderingKeyBytes && headerSafe(key) && !strings.HasPrefix(key, HashedKeyPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return HashedKeyPrefix + hex.EncodeToString(sum[:])
}

// Partition is the partition of an ordering key (its header value, see
// [OrderingKeyHeader]) among n: FNV-1a, like nats-server's own
// partition() subject transform.
func Partition(keyHeader string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(keyHeader)) // never fails
	return int(h.Sum32() % uint32(n))
}

// KeyedHookSubject is the subject of a keyed webhook in partition p.
func KeyedHookSubject(p int, source, eventType string) string {
	return HooksKeyedRoot + "." + strconv.Itoa(p) + "." + source + "." + TypeSubject(eventType)
}

// KeyedHookFilter is the filter subject of eventType from one source (or
// every source, for "" or "*") in partition p (every partition, p < 0).
func KeyedHookFilter(p int, source, eventType string) string {
	if source == "" {
		source = "*"
	}
	part := "*"
	if p >= 0 {
		part = strconv.Itoa(p)
	}
	return HooksKeyedRoot + "." + part + "." + source + "." + TypeSubject(eventType)
}

// SplitHookSubject returns the source and the mapped type of a HOOKS
// subject, keyed or not, and the partition (-1 when unkeyed).
func SplitHookSubject(subject string) (source, typeTail string, partition int, ok bool) {
	root, rest, found := strings.Cut(subject, ".")
	if !found {
		return "", "", -1, false
	}
	partition = -1
	switch root {
	case HooksRoot:
	case HooksKeyedRoot:
		var p string
		p, rest, found = strings.Cut(rest, ".")
		n, err := strconv.Atoi(p)
		if !found || err != nil || n < 0 {
			return "", "", -1, false
		}
		partition = n
	default:
		return "", "", -1, false
	}
	source, typeTail, found = strings.Cut(rest, ".")
	if !found || source == "" || typeTail == "" {
		return "", "", -1, false
	}
	return source, typeTail, partition, true
}

// ErrPartitionsChanged is returned by [CheckPartitions] when HOOKS records
// another number of partitions than the configuration asks for.
var ErrPartitionsChanged = errors.New("partitions differ from the ones HOOKS was created with")

// PartitionCount reads the number of partitions recorded on the HOOKS
// stream, 0 when the stream or the record does not exist.
func PartitionCount(ctx context.Context, js jetstream.JetStream) (int, error) {
	s, err := js.Stream(ctx, Hooks)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", Hooks, err)
	}
	v := s.CachedInfo().Config.Metadata[MetadataPartitions]
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("stream %s: metadata %s=%q is not a number of partitions", Hooks, MetadataPartitions, v)
	}
	return n, nil
}

// CheckPartitions refuses a configured number of partitions that differs
// from the one HOOKS records: keys already published are spread over the
// recorded number, and a consumer reading another number would miss
// partitions or read two partitions' keys out of order.
func CheckPartitions(ctx context.Context, js jetstream.JetStream, configured int) error {
	recorded, err := PartitionCount(ctx, js)
	if err != nil || recorded == 0 || recorded == configured {
		return err
	}
	return fmt.Errorf("streams.partitions is %d but stream %s was created with %d: %w "+
		"(set streams.partitions: %d; see docs/DESIGN.md, \"Order\", for changing it)",
		configured, Hooks, recorded, ErrPartitionsChanged, recorded)
}

// ServerAtLeast reports whether the nats-server version v (as
// nats.Conn.ConnectedServerVersion gives it) is at least min.
func ServerAtLeast(v, min string) bool {
	parse := func(s string) [3]int {
		var out [3]int
		s, _, _ = strings.Cut(strings.TrimPrefix(s, "v"), "-")
		for i, part := range strings.SplitN(s, ".", 3) {
			out[i], _ = strconv.Atoi(part)
		}
		return out
	}
	a, b := parse(v), parse(min)
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

// The members of keyed consumers (which instances run each one) live in
// a key-value bucket of their own, in memory: entries expire after the
// TTL, so a member that died leaves the list by itself, and losing the
// bucket with a NATS restart costs one heartbeat.
const (
	MembersBucket = "hookbridge_members"
	// MembersStream is the bucket's stream, as JetStream names it.
	MembersStream = "KV_" + MembersBucket
)

// MembersSubject is the bucket subject of a member of consumer ("" member:
// the prefix of all of them).
func MembersSubject(consumer, member string) string {
	return "$KV." + MembersBucket + "." + consumer + "." + member
}

// MembersConfig is the members bucket's configuration.
func MembersConfig(ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      MembersBucket,
		Description: "hookbridge: the instances running each keyed consumer",
		TTL:         ttl,
		History:     1,
		Storage:     jetstream.MemoryStorage,
	}
}
