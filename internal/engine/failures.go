package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/store"
)

// A message's failures that count toward max_deliver live in
// hookbridge.delivery_failures, keyed by consumer, source, event id and
// stream sequence. JetStream's delivery count is no substitute: it also
// grows with every nak after a transient failure and every ack_wait
// redelivery, and an outage must never dead-letter an event.
//
// The counter is written on the pool, outside the transaction that failed
// (that one rolled back, and anything written in it with it). It is
// deleted inside the transaction that applies the event, so an applied
// event never leaves a counter behind and a rolled-back apply never loses
// one, and together with the dead-letter row.

// countTimeout bounds the counter's upsert: when the database hangs, the
// failure cannot be counted and the message is nak'd instead, without
// holding the batch for long.
const countTimeout = 5 * time.Second

// countFailure adds one failure to the message's counter and returns the
// new count, or 0 when the message was settled meanwhile by another
// delivery of it (applied, or dead-lettered): two deliveries of one
// message can be in flight at once after an ack_wait expiry, and a
// counter created after the other one's dead letter or apply deleted it
// would stay forever.
//
// Checking for the other delivery's inbox or dead-letter row is not
// enough on its own: in READ COMMITTED the upsert does not see a row the
// other delivery has not committed yet, and that one's deletion of the
// counter has already run (the apply deletes it with its claim). So the
// upsert first waits for both: it tries the message's inbox claim, which
// waits for an apply of the key in flight exactly as a racing claim does
// (and holds off a new one until this transaction ends, after which that
// one's deletion sees this counter), and takes the message's lock that
// [RecordDeadLetter] takes. The probe's inbox row is deleted again in the
// same transaction; nobody ever sees it.
func countFailure(ctx context.Context, pool *pgxpool.Pool, consumerName string, ev consumer.Event, cause error, timeout time.Duration) (int, error) {
	var n int
	err := underMessageLock(ctx, pool, consumerName, ev, timeout, func(tx pgx.Tx, k store.MessageKey) (err error) {
		n, err = store.FailureIncrement(ctx, tx, consumerName, k, ShortError(cause.Error()))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count failure of %s/%s seq %d: %w", ev.Source, ev.ID, ev.StreamSeq, err)
	}
	return n, nil
}

// notePostponed records that ev was postponed (see [consumer.Postpone])
// and returns since when it has been, or the zero time when the message
// was settled meanwhile by another delivery of it, as for countFailure.
// passedBy is a later event of its key that applied in the same batch,
// which could not mark the row before it existed (nil: none).
func notePostponed(ctx context.Context, pool *pgxpool.Pool, consumerName string, ev consumer.Event, cause error, passedBy *store.PassingEvent,
	timeout time.Duration) (time.Time, error) {
	var since time.Time
	err := underMessageLock(ctx, pool, consumerName, ev, timeout, func(tx pgx.Tx, k store.MessageKey) (err error) {
		since, err = store.FailurePostpone(ctx, tx, consumerName, k, ev.OrderingKey, ShortError(cause.Error()), passedBy)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("note postponement of %s/%s seq %d: %w", ev.Source, ev.ID, ev.StreamSeq, err)
	}
	return since, nil
}

// underMessageLock runs write in a transaction that first waits for any
// other delivery of ev's message to settle (see countFailure).
func underMessageLock(ctx context.Context, pool *pgxpool.Pool, consumerName string, ev consumer.Event, timeout time.Duration,
	write func(tx pgx.Tx, k store.MessageKey) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockMessage(ctx, tx, consumerName, ev.Source, ev.ID, ev.StreamSeq); err != nil {
			return err
		}
		probed, err := store.InboxClaim(ctx, tx, consumerName, inboxEntry(&ev))
		if err != nil {
			return fmt.Errorf("probe inbox: %w", err)
		}
		if probed {
			if err := store.InboxDelete(ctx, tx, consumerName, ev.Source, ev.ID); err != nil {
				return fmt.Errorf("remove inbox probe: %w", err)
			}
		}
		return write(tx, store.MessageKey{Source: ev.Source, EventID: ev.ID, StreamSeq: ev.StreamSeq})
	})
}

// lockMessage takes the transaction lock that serialises the failure
// counter's upsert with the dead letter of the same message, so that
// neither misses the other's committed row.
func lockMessage(ctx context.Context, tx pgx.Tx, consumerName, source, id string, seq uint64) error {
	if err := store.MessageLock(ctx, tx, consumerName, source, id, seq); err != nil {
		return fmt.Errorf("lock message: %w", err)
	}
	return nil
}

// queueClearFailures adds the deletion of the counters of evs' redelivered
// messages to b and reports whether it did (no event was redelivered: no
// counter can exist, nothing is queued).
func queueClearFailures(b *pgx.Batch, consumerName string, evs []consumer.Event) bool {
	var keys []store.MessageKey
	for _, ev := range evs {
		if ev.NumDelivered > 1 {
			keys = append(keys, store.MessageKey{Source: ev.Source, EventID: ev.ID, StreamSeq: ev.StreamSeq})
		}
	}
	if len(keys) == 0 {
		return false
	}
	store.QueueFailureClear(b, consumerName, keys)
	return true
}

// passedInBatch names, for each keyed event of a batch that its handler
// postponed, the first later event of its key that applied in the batch
// (processed, or a conflict, whose transaction marks as an apply's does);
// none for the others. That one committed before the postponement is
// recorded, so it could not mark the postponement's row.
func passedInBatch(evs []consumer.Event, results []consumer.Result) map[int]*store.PassingEvent {
	var passed map[int]*store.PassingEvent
	for j, r := range results {
		if evs[j].OrderingKey == "" || r.Outcome != consumer.Failed || !consumer.IsPostponed(r.Err) {
			continue
		}
		var by *consumer.Event
		for k, later := range results {
			e := &evs[k]
			if (later.Outcome == consumer.Processed || later.Outcome == consumer.Conflict) && e.Source == evs[j].Source &&
				e.OrderingKey == evs[j].OrderingKey && e.StreamSeq > evs[j].StreamSeq && (by == nil || e.StreamSeq < by.StreamSeq) {
				by = e
			}
		}
		if by != nil {
			if passed == nil {
				passed = map[int]*store.PassingEvent{}
			}
			passed[j] = &store.PassingEvent{Source: by.Source, OrderingKey: by.OrderingKey, EventID: by.ID, StreamSeq: by.StreamSeq}
		}
	}
	return passed
}
