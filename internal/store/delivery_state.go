package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeliveryNotifyChannel is the channel on which a change of an endpoint's
// state, lease or pending deliveries is announced (the payload is the
// endpoint's name).
const DeliveryNotifyChannel = "hookbridge_delivery"

var (
	sqlDeliveryEndpointEnsure      = load("delivery_endpoint_ensure.sql")
	sqlDeliveryEndpointLease       = load("delivery_endpoint_lease.sql")
	sqlDeliveryEndpointRelease     = load("delivery_endpoint_release.sql")
	sqlDeliveryEndpointHold        = load("delivery_endpoint_hold.sql")
	sqlDeliveryEndpointSetState    = load("delivery_endpoint_set_state.sql")
	sqlDeliveryEndpointFail        = load("delivery_endpoint_fail.sql")
	sqlDeliveryEndpointRecover     = load("delivery_endpoint_recover.sql")
	sqlDeliveryEndpointList        = load("delivery_endpoint_list.sql")
	sqlDeliveryInstanceBeat        = load("delivery_instance_beat.sql")
	sqlDeliveryInstanceList        = load("delivery_instance_list.sql")
	sqlDeliveryInstanceDelete      = load("delivery_instance_delete.sql")
	sqlDeliveryPendingFail         = load("delivery_pending_fail.sql")
	sqlDeliveryPendingPark         = load("delivery_pending_park.sql")
	sqlDeliveryPendingReplay       = load("delivery_pending_replay.sql")
	sqlDeliveryPendingDue          = load("delivery_pending_due.sql")
	sqlDeliveryPendingNextDue      = load("delivery_pending_next_due.sql")
	sqlDeliveryPendingHead         = load("delivery_pending_head.sql")
	sqlDeliveryPendingGet          = load("delivery_pending_get.sql")
	sqlDeliveryPendingDone         = load("delivery_pending_done.sql")
	sqlDeliveryPendingKeys         = load("delivery_pending_keys.sql")
	sqlDeliveryPendingCount        = load("delivery_pending_count.sql")
	sqlDeliveryPendingListForEvent = load("delivery_pending_list_for_event.sql")
	sqlDeliveryPendingUnpark       = load("delivery_pending_unpark.sql")
	sqlDeliveryPendingPromoteHeads = load("delivery_pending_promote_heads.sql")
)

// Endpoint states.
const (
	DeliveryEnabled  = "enabled"
	DeliveryDisabled = "disabled"
)

// DeliveryEndpoint is one row of hookbridge.delivery_endpoints: the state
// of an endpoint every instance shares.
type DeliveryEndpoint struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// FailingSince is the first failed attempt with no successful one
	// since (nil: not failing).
	FailingSince   *time.Time `json:"failing_since,omitempty"`
	StateChangedAt time.Time  `json:"state_changed_at"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	// Owner is the instance reading the endpoint, until LeaseUntil;
	// Leased says whether that lease is still running.
	Owner      string     `json:"owner,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	Leased     bool       `json:"leased"`
}

// DeliveryEndpointEnsure gives each named endpoint a row (enabled) unless
// it has one.
func DeliveryEndpointEnsure(ctx context.Context, q Querier, names []string) error {
	_, err := q.Exec(ctx, sqlDeliveryEndpointEnsure, names)
	return err
}

// DeliveryLease is an endpoint an instance holds, and its state.
type DeliveryLease struct {
	Name  string
	State string
}

// DeliveryEndpointLease renews owner's leases on names, takes those of
// names nobody holds (or whose lease ran out) for ttl, and returns the
// endpoints of names owner holds now.
func DeliveryEndpointLease(ctx context.Context, q Querier, owner string, names []string, ttl time.Duration) ([]DeliveryLease, error) {
	rows, err := q.Query(ctx, sqlDeliveryEndpointLease, owner, names, ttl.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryLease, error) {
		var l DeliveryLease
		err := r.Scan(&l.Name, &l.State)
		return l, err
	})
}

// DeliveryEndpointRelease gives owner's leases on names up and wakes the
// other instances.
func DeliveryEndpointRelease(ctx context.Context, q Querier, owner string, names []string) error {
	_, err := returnsRows(ctx, q, sqlDeliveryEndpointRelease, owner, names)
	return err
}

// DeliveryEndpointHold locks endpoint's row in tx when owner holds its
// lease, and reports whether it does: the writes that follow in tx are
// then seen by the endpoint's next owner.
func DeliveryEndpointHold(ctx context.Context, tx pgx.Tx, endpoint, owner string) (bool, error) {
	return returnsRows(ctx, tx, sqlDeliveryEndpointHold, endpoint, owner)
}

// DeliveryEndpointSetState enables or disables endpoint (reason says
// why, "" when enabling) and notifies every instance; changed is false
// when it was in that state already.
func DeliveryEndpointSetState(ctx context.Context, q Querier, endpoint, state, reason string) (changed bool, err error) {
	return returnsRows(ctx, q, sqlDeliveryEndpointSetState, endpoint, state, reason)
}

// DeliveryEndpointFail starts endpoint's failing clock unless it runs and
// returns since when, and for how long, it has been failing.
func DeliveryEndpointFail(ctx context.Context, q Querier, endpoint string) (since time.Time, failingFor time.Duration, err error) {
	var ms int64
	err = q.QueryRow(ctx, sqlDeliveryEndpointFail, endpoint).Scan(&since, &ms)
	if err == pgx.ErrNoRows {
		return time.Time{}, 0, nil
	}
	return since, time.Duration(ms) * time.Millisecond, err
}

// DeliveryEndpointRecover stops endpoint's failing clock after an attempt
// that succeeded.
func DeliveryEndpointRecover(ctx context.Context, q Querier, endpoint string) error {
	_, err := q.Exec(ctx, sqlDeliveryEndpointRecover, endpoint)
	return err
}

// DeliveryEndpointList returns every endpoint's row, by name.
func DeliveryEndpointList(ctx context.Context, q Querier) ([]DeliveryEndpoint, error) {
	rows, err := q.Query(ctx, sqlDeliveryEndpointList)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryEndpoint, error) {
		var e DeliveryEndpoint
		err := r.Scan(&e.Name, &e.State, &e.FailingSince, &e.StateChangedAt, &e.DisabledReason, &e.Owner,
			&e.LeaseUntil, &e.Leased)
		return e, err
	})
}

// DeliveryInstance is an instance running the delivery role.
type DeliveryInstance struct {
	ID   string
	Host string
	PID  int
	// Endpoints are the endpoints it is configured with.
	Endpoints []string
}

// DeliveryInstanceBeat announces instance i as running the delivery
// role.
func DeliveryInstanceBeat(ctx context.Context, q Querier, i DeliveryInstance) error {
	_, err := q.Exec(ctx, sqlDeliveryInstanceBeat, i.ID, i.Host, i.PID, i.Endpoints)
	return err
}

// DeliveryInstanceList returns the delivery instances seen within
// within (their ids and endpoints), by id.
func DeliveryInstanceList(ctx context.Context, q Querier, within time.Duration) ([]DeliveryInstance, error) {
	rows, err := q.Query(ctx, sqlDeliveryInstanceList, within.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryInstance, error) {
		var i DeliveryInstance
		err := r.Scan(&i.ID, &i.Endpoints)
		return i, err
	})
}

// DeliveryInstanceDelete removes instance id, and the rows of instances
// gone for a day.
func DeliveryInstanceDelete(ctx context.Context, q Querier, id string) error {
	_, err := q.Exec(ctx, sqlDeliveryInstanceDelete, id)
	return err
}

// Origins of a pending delivery.
const (
	PendingFailed  = "failed"  // an attempt failed; it is retried on the schedule
	PendingParked  = "parked"  // waits behind an earlier event of its key
	PendingRequeue = "requeue" // a requeued dead letter
	PendingReplay  = "replay"  // replayed by an operator
)

// DeliveryPending is one row of hookbridge.delivery_pending: a delivery
// Postgres tracks rather than JetStream.
type DeliveryPending struct {
	Endpoint    string `json:"endpoint"`
	StreamSeq   uint64 `json:"stream_seq"`
	EventID     string `json:"event_id"`
	Subject     string `json:"subject"`
	OrderingKey string `json:"ordering_key,omitempty"`
	// Attempts is how many attempts failed so far.
	Attempts int `json:"attempts"`
	// NextAttemptAt is when it is due (nil: it waits behind an earlier
	// event of its key).
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	Origin        string     `json:"origin"`
	// DeadLetterID is the requeued dead letter (0: none).
	DeadLetterID int64 `json:"dead_letter_id,omitempty"`
}

// DeliveryPendingFail records, as endpoint's owner, that attempt
// attempts of p failed and the next is due after next. written is false,
// and nothing written, when owner does not hold the endpoint's lease.
func DeliveryPendingFail(ctx context.Context, q Querier, owner string, p DeliveryPending, next time.Duration) (written bool, err error) {
	return returnsRows(ctx, q, sqlDeliveryPendingFail, p.Endpoint, owner, int64(p.StreamSeq), p.EventID, p.Subject,
		p.OrderingKey, p.Attempts, next.Seconds())
}

// DeliveryPendingPark parks ps (events of one ordered endpoint) behind
// the earlier events of their keys, as the endpoint's owner. held is
// false, and nothing written, when owner does not hold the lease; parked
// counts the rows that were new.
func DeliveryPendingPark(ctx context.Context, q Querier, endpoint, owner string, ps []DeliveryPending) (held bool, parked int, err error) {
	seqs, ids, subjects, keys := pendingColumns(ps)
	err = q.QueryRow(ctx, sqlDeliveryPendingPark, endpoint, owner, seqs, ids, subjects, keys).Scan(&held, &parked)
	return held, parked, err
}

// DeliveryPendingReplay queues ps (events of endpoint) as a replay and
// returns how many were not pending already; ordered says whether the
// endpoint keeps order per key.
func DeliveryPendingReplay(ctx context.Context, q Querier, endpoint string, ordered bool, ps []DeliveryPending) (int, error) {
	seqs, ids, subjects, keys := pendingColumns(ps)
	var n int
	err := q.QueryRow(ctx, sqlDeliveryPendingReplay, endpoint, seqs, ids, subjects, keys, ordered).Scan(&n, new(string))
	return n, err
}

func pendingColumns(ps []DeliveryPending) (seqs []int64, ids, subjects, keys []string) {
	for _, p := range ps {
		seqs = append(seqs, int64(p.StreamSeq))
		ids = append(ids, p.EventID)
		subjects = append(subjects, p.Subject)
		keys = append(keys, p.OrderingKey)
	}
	return seqs, ids, subjects, keys
}

// DeliveryPendingDue returns up to limit of endpoint's due deliveries,
// the longest due first.
func DeliveryPendingDue(ctx context.Context, q Querier, endpoint string, limit int) ([]DeliveryPending, error) {
	rows, err := q.Query(ctx, sqlDeliveryPendingDue, endpoint, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryPending, error) {
		p := DeliveryPending{Endpoint: endpoint}
		var seq int64
		var at time.Time
		err := r.Scan(&seq, &p.EventID, &p.Subject, &p.OrderingKey, &p.Attempts, &at, &p.Origin, &p.DeadLetterID)
		p.StreamSeq, p.NextAttemptAt = uint64(seq), &at
		return p, err
	})
}

// DeliveryPendingNextDue returns how long until endpoint's next delivery
// becomes due; ok is false when none will by itself.
func DeliveryPendingNextDue(ctx context.Context, q Querier, endpoint string) (d time.Duration, ok bool, err error) {
	var ms *int64
	if err := q.QueryRow(ctx, sqlDeliveryPendingNextDue, endpoint).Scan(&ms); err != nil || ms == nil {
		return 0, false, err
	}
	return time.Duration(*ms) * time.Millisecond, true, nil
}

// DeliveryPendingHead returns the first delivery of key on endpoint and
// how long until it is due, by the database's clock (which wrote its
// time: an instance's clock may differ); ok is false when the key has
// none.
func DeliveryPendingHead(ctx context.Context, q Querier, endpoint, key string) (p DeliveryPending, dueIn time.Duration, ok bool, err error) {
	p = DeliveryPending{Endpoint: endpoint}
	var seq, ms int64
	err = q.QueryRow(ctx, sqlDeliveryPendingHead, endpoint, key).Scan(&seq, &p.EventID, &p.Subject, &p.OrderingKey,
		&p.Attempts, &p.NextAttemptAt, &p.Origin, &p.DeadLetterID, &ms)
	if err == pgx.ErrNoRows {
		return DeliveryPending{}, 0, false, nil
	}
	if err != nil {
		return DeliveryPending{}, 0, false, err
	}
	p.StreamSeq = uint64(seq)
	return p, time.Duration(ms) * time.Millisecond, true, nil
}

// DeliveryPendingGet returns endpoint's delivery of stream sequence seq;
// ok is false when Postgres tracks none.
func DeliveryPendingGet(ctx context.Context, q Querier, endpoint string, seq uint64) (p DeliveryPending, ok bool, err error) {
	return scanPendingRow(q.QueryRow(ctx, sqlDeliveryPendingGet, endpoint, int64(seq)), endpoint)
}

func scanPendingRow(row pgx.Row, endpoint string) (DeliveryPending, bool, error) {
	p := DeliveryPending{Endpoint: endpoint}
	var seq int64
	err := row.Scan(&seq, &p.EventID, &p.Subject, &p.OrderingKey, &p.Attempts, &p.NextAttemptAt, &p.Origin, &p.DeadLetterID)
	if err == pgx.ErrNoRows {
		return DeliveryPending{}, false, nil
	}
	p.StreamSeq = uint64(seq)
	return p, err == nil, err
}

// DeliveryPendingDone ends endpoint's delivery of seq (delivered or
// dead-lettered) and makes the next of its key due; more says whether the
// key has rows left.
func DeliveryPendingDone(ctx context.Context, q Querier, endpoint string, seq uint64, key string) (more bool, err error) {
	var n int
	err = q.QueryRow(ctx, sqlDeliveryPendingDone, endpoint, int64(seq), key).Scan(&n)
	return n > 0, err
}

// QueueDeliveryPendingDone adds [DeliveryPendingDone] to b.
func QueueDeliveryPendingDone(b *pgx.Batch, endpoint string, seq uint64, key string) {
	b.Queue(sqlDeliveryPendingDone, endpoint, int64(seq), key)
}

// DeliveryPendingKeys returns the keys of an ordered endpoint that have
// deliveries in Postgres.
func DeliveryPendingKeys(ctx context.Context, q Querier, endpoint string) ([]string, error) {
	rows, err := q.Query(ctx, sqlDeliveryPendingKeys, endpoint)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// DeliveryPendingCounts is an endpoint's deliveries in Postgres.
type DeliveryPendingCounts struct {
	Endpoint string
	// Count is every row; Failing those with a failed attempt.
	Count, Failing int
	Oldest         time.Time
}

// DeliveryPendingCount returns the deliveries Postgres tracks, per
// endpoint (endpoints without any are absent).
func DeliveryPendingCount(ctx context.Context, q Querier) ([]DeliveryPendingCounts, error) {
	rows, err := q.Query(ctx, sqlDeliveryPendingCount)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryPendingCounts, error) {
		var c DeliveryPendingCounts
		err := r.Scan(&c.Endpoint, &c.Count, &c.Failing, &c.Oldest)
		return c, err
	})
}

// DeliveryPendingListForEvent returns an event's deliveries Postgres
// tracks, per endpoint.
func DeliveryPendingListForEvent(ctx context.Context, q Querier, eventID string) ([]DeliveryPending, error) {
	rows, err := q.Query(ctx, sqlDeliveryPendingListForEvent, eventID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryPending, error) {
		var p DeliveryPending
		var seq int64
		err := r.Scan(&p.Endpoint, &seq, &p.EventID, &p.Subject, &p.OrderingKey, &p.Attempts, &p.NextAttemptAt,
			&p.Origin, &p.DeadLetterID)
		p.StreamSeq = uint64(seq)
		return p, err
	})
}

// DeliveryPendingUnpark makes the parked deliveries of endpoint due (it
// no longer keeps order per key).
func DeliveryPendingUnpark(ctx context.Context, q Querier, endpoint string) error {
	_, err := q.Exec(ctx, sqlDeliveryPendingUnpark, endpoint)
	return err
}

// DeliveryPendingPromoteHeads makes due the first row of each key
// (keys[i] of endpoints[i]) that waits with no row of its key before it,
// and wakes the endpoints' owners. A requeue or a replay calls it after
// its rows are committed: its statement may have put a row behind one
// that ended meanwhile, whose end did not see it to make it due.
func DeliveryPendingPromoteHeads(ctx context.Context, q Querier, endpoints, keys []string) error {
	rows, err := q.Query(ctx, sqlDeliveryPendingPromoteHeads, endpoints, keys)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}
