package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// Members of a keyed consumer: which instances run it now, so that its
// partitions are spread over them. Each instance keeps a key of its own
// ("<consumer>.<member id>") alive in a JetStream key-value bucket whose
// entries expire after [memberTTL]; a member that stops deletes its key,
// one that dies is gone from the list within memberTTL. Every member
// computes the same assignment from the same list ([assign]).
//
// The list decides only who pulls which partition. That no two members
// apply a partition at once is JetStream's doing: each partition durable
// pins one client at a time (priority group, policy pinned_client), and a
// member that takes a partition over waits until nothing of it is held
// elsewhere (partition.go). So a list that is briefly wrong (a member has
// not yet seen another join) costs a short pause, never order.

// memberTTL is how long a member's key outlives its last heartbeat.
const memberTTL = 9 * time.Second

// Member is one instance running a keyed consumer, as its member key
// says: for status and the console.
type Member struct {
	ID      string    `json:"id"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Partitions are the partitions it serves (as of its last heartbeat).
	Partitions []int `json:"partitions"`
}

// membership keeps this instance's member key alive and reports the
// members of one consumer.
type membership struct {
	js       jetstream.JetStream
	consumer string
	id       string
	log      *slog.Logger
	ttl      time.Duration

	mu   sync.Mutex
	self Member
	// lastOK is when a heartbeat last put the key and listed the
	// members (unix nanoseconds; 0 before the first).
	lastOK atomic.Int64
}

func newMembership(js jetstream.JetStream, consumer string, log *slog.Logger) *membership {
	host, _ := os.Hostname()
	id := nuid.Next()
	return &membership{js: js, consumer: consumer, id: id, log: log, ttl: memberTTL,
		self: Member{ID: id, Host: host, PID: os.Getpid(), Started: time.Now().UTC(), Partitions: []int{}}}
}

// serving records the partitions this member serves, for its next
// heartbeat.
func (m *membership) serving(partitions []int) {
	m.mu.Lock()
	m.self.Partitions = slices.Clone(partitions)
	m.mu.Unlock()
}

func (m *membership) value() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, _ := json.Marshal(m.self) // plain data: never fails
	return b
}

func (m *membership) key() string { return m.consumer + "." + m.id }

// bucket opens the members bucket, creating it when it is missing (also
// after a NATS restart lost it: it is in memory).
func (m *membership) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := m.js.KeyValue(ctx, stream.MembersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = m.js.CreateOrUpdateKeyValue(ctx, stream.MembersConfig(m.ttl))
	}
	if err != nil {
		return nil, fmt.Errorf("members bucket: %w", err)
	}
	return kv, nil
}

// run announces this member every ttl/3 and calls onChange with the
// sorted member ids whenever they change, until ctx ends; then it removes
// this member's key so the others take its partitions over at once. A
// member that joins or leaves is seen at once through a watch on the
// members' keys; one that dies, when its key expires (the watch does not
// report expiries, the next heartbeat's list does).
func (m *membership) run(ctx context.Context, onChange func(members []string)) {
	var last []string
	beat := time.NewTicker(m.ttl / 3)
	defer beat.Stop()
	changed := make(chan struct{}, 1)
	var watcher jetstream.KeyWatcher
	defer func() {
		if watcher != nil {
			_ = watcher.Stop()
		}
	}()
	warned := false
	for {
		members, err := m.beat(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !warned {
				m.log.Warn("consumer membership: heartbeat failed; keeping the last member list", "consumer", m.consumer, "err", err)
				warned = true
			}
		case err == nil:
			warned = false
			if !slices.Equal(members, last) {
				last = members
				onChange(members)
			}
			if watcher == nil {
				watcher = m.watch(ctx, changed)
			}
		}
		select {
		case <-ctx.Done():
			m.leave()
			return
		case <-beat.C:
		case <-changed:
		}
	}
}

// watch signals changed whenever a member key of the consumer is put or
// deleted; nil when the watch cannot start (the heartbeat still lists).
func (m *membership) watch(ctx context.Context, changed chan<- struct{}) jetstream.KeyWatcher {
	kv, err := m.bucket(ctx)
	if err != nil {
		return nil
	}
	w, err := kv.Watch(ctx, m.consumer+".*", jetstream.UpdatesOnly())
	if err != nil {
		return nil
	}
	go func() {
		for e := range w.Updates() {
			if e != nil && e.Key() != m.key() {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	return w
}

// beat puts this member's key and lists the members.
func (m *membership) beat(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := m.bucket(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := kv.Put(ctx, m.key(), m.value()); err != nil {
		return nil, fmt.Errorf("announce member: %w", err)
	}
	ids, err := listMembers(ctx, m.js, kv, m.consumer)
	if err == nil {
		m.lastOK.Store(time.Now().UnixNano())
	}
	return ids, err
}

// leaseLost reports whether this member's key may have expired: its last
// successful heartbeat is older than the key's lifetime, so the others
// may have taken its partitions over.
func (m *membership) leaseLost() bool {
	last := m.lastOK.Load()
	return last != 0 && time.Since(time.Unix(0, last)) > m.ttl
}

func (m *membership) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if kv, err := m.js.KeyValue(ctx, stream.MembersBucket); err == nil {
		_ = kv.Delete(ctx, m.key()) // best effort: the key expires anyway
	}
}

// listMembers returns the sorted ids of the live members of consumer:
// the bucket subjects that hold a message (an expired entry holds none),
// less those whose last message is the delete marker of a member that
// left. (A key listing is no substitute: it reads the bucket through a
// consumer made for the occasion, which misses a key another member
// rewrites at that moment, and the members seemed to come and go.)
func listMembers(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, consumer string) ([]string, error) {
	s, err := js.Stream(ctx, stream.MembersStream)
	if err != nil {
		return nil, fmt.Errorf("members stream: %w", err)
	}
	prefix := stream.MembersSubject(consumer, "")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	var ids []string
	for subj := range info.State.Subjects {
		id := strings.TrimPrefix(subj, prefix)
		if _, err := kv.Get(ctx, consumer+"."+id); errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // left: its delete marker stays until the entry expires
		} else if err != nil {
			return nil, fmt.Errorf("member %s: %w", id, err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Members reads the members of consumer from their keys: who serves
// which partition. A deployment without keyed consumers has none.
func Members(ctx context.Context, js jetstream.JetStream, consumer string) ([]Member, error) {
	kv, err := js.KeyValue(ctx, stream.MembersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("members bucket: %w", err)
	}
	ids, err := listMembers(ctx, js, kv, consumer)
	if err != nil {
		return nil, err
	}
	var out []Member
	for _, id := range ids {
		e, err := kv.Get(ctx, consumer+"."+id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // left meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", id, err)
		}
		var m Member
		if json.Unmarshal(e.Value(), &m) == nil {
			m.ID = id
			out = append(out, m)
		}
	}
	return out, nil
}

// assign returns the partitions of n that member serves among members.
// Every member computes the same answer from the same list: each
// partition goes to the member that ranks it highest (a hash of member
// and partition) among those below their share, ceil(n / members). So the
// shares are even, and a member that joins or leaves moves little more
// than its own share. A member that is not in the list yet (its first
// heartbeat is not listed) counts itself.
func assign(members []string, member string, n int) []int {
	if !slices.Contains(members, member) {
		members = append(slices.Clone(members), member)
	}
	share := (n + len(members) - 1) / len(members)
	load := make(map[string]int, len(members))
	var out []int
	for p := range n {
		ranked := slices.Clone(members)
		slices.SortFunc(ranked, func(a, b string) int {
			return cmp.Or(cmp.Compare(rank(b, p), rank(a, p)), cmp.Compare(a, b))
		})
		for _, m := range ranked {
			if load[m] < share {
				load[m]++
				if m == member {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

// rank is how much member wants partition p.
func rank(member string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member + "/" + strconv.Itoa(p))) // never fails
	return h.Sum64()
}
