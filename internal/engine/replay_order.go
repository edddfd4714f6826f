package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// A replay of a keyed consumer keeps the promise the live path keeps: no
// event applies before an earlier event of its (source, key). So a keyed
// event is applied only when every earlier message of its key is applied
// or dead-lettered, or was applied by this replay before it; else it is
// held (ReplayHeld, with the reason) and so are the key's later events.
// An earlier message is unsettled when the live consumer holds it (it is
// failing, or waits its turn), when it lies before the replayed range, or
// when the selectors leave it out (another type). The replay finds them
// once, at its start: what a consumer has not acked lies above its
// partition durables' ack floors, so it reads (headers only) the keyed
// messages from each floor to the replay's last sequence, and asks the
// inbox and the dead letters which of them are settled. A message the
// live consumer settles while the replay runs is looked up again before a
// later one is held for it.

// maxReplayScan bounds what a replay reads to find unsettled messages:
// past it, the replay refuses to run instead of applying out of order.
const maxReplayScan = 100000

// keyOrder is the order a keyed replay keeps.
type keyOrder struct {
	pool     *pgxpool.Pool
	consumer string
	// unsettled are the keys' messages not applied or dead-lettered, in
	// stream order, as found at the start and settled since.
	unsettled map[string][]foreignRef
	// held are the keys the replay holds from here on, with the reason.
	held map[string]string
}

// errReplayScan: too much unsettled history to keep the replay in order.
var errReplayScan = errors.New("too many messages of the consumer's keys are unacknowledged to keep a replay in order")

// newKeyOrder reads what is unsettled of the consumer's keyed messages up
// to last; nil when the stream has no partitions.
func newKeyOrder(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, o ReplayOptions, last uint64) (*keyOrder, error) {
	n, err := stream.PartitionCount(ctx, js)
	if err != nil || n == 0 {
		return nil, err
	}
	k := &keyOrder{pool: pool, consumer: o.Consumer, unsettled: map[string][]foreignRef{}, held: map[string]string{}}
	// Every type the consumer reads, not only the selected one: an
	// unsettled event of another type holds a key as much.
	subjects := (&Options{Sources: o.Sources, EventTypes: o.EventTypes})
	budget := maxReplayScan
	for p := range n {
		floor, err := ackFloor(ctx, js, stream.PartitionDurable(o.Consumer, p))
		if err != nil {
			return nil, err
		}
		if floor >= last {
			continue
		}
		found, err := scanHeaders(ctx, js, subjects.keyedFilterSubjects(p), floor+1, last, budget)
		if errors.Is(err, errForeignScan) {
			return nil, fmt.Errorf("replay %s: partition %d holds more than %d unacknowledged messages from its ack floor (seq %d): %w",
				o.Consumer, p, maxReplayScan, floor, errReplayScan)
		}
		if err != nil {
			return nil, fmt.Errorf("replay %s: read partition %d: %w", o.Consumer, p, err)
		}
		budget -= len(found)
		settled, err := settledIn(ctx, pool, o.Consumer, found)
		if err != nil {
			return nil, fmt.Errorf("replay %s: %w", o.Consumer, err)
		}
		for _, r := range found {
			if !settled[r.seq] {
				k.unsettled[r.key] = append(k.unsettled[r.key], r)
			}
		}
	}
	return k, nil
}

// ackFloor is the stream sequence a durable has acked everything up to (0
// when it does not exist).
func ackFloor(ctx context.Context, js jetstream.JetStream, durable string) (uint64, error) {
	c, err := js.Consumer(ctx, stream.Hooks, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up durable %s: %w", durable, err)
	}
	return c.CachedInfo().AckFloor.Stream, nil
}

// blocked says why ev may not apply now ("" when it may): its key is
// held, or an earlier message of its key is unsettled.
func (k *keyOrder) blocked(ctx context.Context, ev consumer.Event) string {
	if k == nil || ev.OrderingKey == "" {
		return ""
	}
	key := orderKey(ev.Source, ev.OrderingKey)
	if why, ok := k.held[key]; ok {
		return why
	}
	earlier := slices.DeleteFunc(slices.Clone(k.unsettled[key]), func(r foreignRef) bool { return r.seq >= ev.StreamSeq })
	if len(earlier) == 0 {
		return ""
	}
	// The live consumer may have settled them since the replay started.
	settled, err := settledIn(ctx, k.pool, k.consumer, earlier)
	if err == nil {
		k.unsettled[key] = slices.DeleteFunc(k.unsettled[key], func(r foreignRef) bool { return settled[r.seq] })
		earlier = slices.DeleteFunc(earlier, func(r foreignRef) bool { return settled[r.seq] })
	}
	if len(earlier) == 0 {
		return ""
	}
	why := fmt.Sprintf("an earlier event of its ordering key is not applied yet (%s/%s, stream seq %d)", earlier[0].source, earlier[0].id, earlier[0].seq)
	k.held[key] = why
	return why
}

// done records what became of ev: applied (or, in a dry run, new), it no
// longer holds its key; failed (postponed too), it holds the key's later
// events. Other outcomes (a dead letter gone from the stream, or passed
// by a later event) leave the key as it was: a dead letter lets its key
// go on.
func (k *keyOrder) done(ev consumer.Event, out consumer.Outcome) {
	if k == nil || ev.OrderingKey == "" {
		return
	}
	key := orderKey(ev.Source, ev.OrderingKey)
	switch out {
	case consumer.Processed, consumer.Duplicate, consumer.Conflict, consumer.ReplayNew:
		k.unsettled[key] = slices.DeleteFunc(k.unsettled[key], func(r foreignRef) bool { return r.seq == ev.StreamSeq })
	case consumer.Failed:
		if _, ok := k.held[key]; !ok {
			k.held[key] = fmt.Sprintf("an earlier event of its ordering key did not apply (%s/%s, stream seq %d)", ev.Source, ev.ID, ev.StreamSeq)
		}
	}
}

// failing records that the live consumer is failing ev (or has it
// postponed), which a dry run reports as new: the real run's apply would
// meet the same, so the key's later events are held behind it.
func (k *keyOrder) failing(ev consumer.Event) {
	if k == nil || ev.OrderingKey == "" {
		return
	}
	key := orderKey(ev.Source, ev.OrderingKey)
	if _, ok := k.held[key]; !ok {
		k.held[key] = fmt.Sprintf("an earlier event of its ordering key is failing at the live consumer (%s/%s, stream seq %d)", ev.Source, ev.ID, ev.StreamSeq)
	}
}
