package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// The operator's side of the delivery: what the command line, the admin
// API, the console and status call. Each works from any instance (or
// from a command with the configuration): the state is in Postgres and
// JetStream, and the instance that reads an endpoint is told through a
// notification.

// Disable disables endpoint name (a configured endpoint's: the caller
// checks the name against the configuration): its reader stops sending
// (attempts in flight end), its durable is paused, and its events wait,
// in EVENTS and in Postgres, until it is enabled; nothing is lost. reason
// is recorded ("manual" when empty). changed is false when it was
// disabled already.
func Disable(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, name, reason string) (changed bool, err error) {
	if reason == "" {
		reason = "manual"
	}
	return disable(ctx, pool, js, name, reason)
}

func disable(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, name, reason string) (bool, error) {
	if err := store.DeliveryEndpointEnsure(ctx, pool, []string{name}); err != nil {
		return false, fmt.Errorf("disable endpoint %s: %w", name, err)
	}
	changed, err := store.DeliveryEndpointSetState(ctx, pool, name, store.DeliveryDisabled, reason)
	if err != nil {
		return false, fmt.Errorf("disable endpoint %s: %w", name, err)
	}
	// Paused whether or not this call changed the state: a reader that
	// started just before may have unpaused it.
	if err := pauseDurable(ctx, js, name); err != nil {
		return changed, fmt.Errorf("disable endpoint %s: pause its durable: %w", name, err)
	}
	return changed, nil
}

// Enable enables endpoint name again: its durable resumes where it
// stopped, its deliveries in Postgres are due on their schedule, and its
// failing clock starts afresh. changed is false when it was enabled.
func Enable(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, name string) (changed bool, err error) {
	if err := store.DeliveryEndpointEnsure(ctx, pool, []string{name}); err != nil {
		return false, fmt.Errorf("enable endpoint %s: %w", name, err)
	}
	changed, err = store.DeliveryEndpointSetState(ctx, pool, name, store.DeliveryEnabled, "")
	if err != nil {
		return false, fmt.Errorf("enable endpoint %s: %w", name, err)
	}
	if _, err := js.ResumeConsumer(ctx, stream.Events, ConsumerName(name)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return changed, fmt.Errorf("enable endpoint %s: resume its durable: %w", name, err)
	}
	return changed, nil
}

// pauseDurable pauses endpoint name's durable (one that does not exist
// yet is created paused by its reader).
func pauseDurable(ctx context.Context, js jetstream.JetStream, name string) error {
	_, err := js.PauseConsumer(ctx, stream.Events, ConsumerName(name), pausedUntil())
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	return err
}

// EndpointStatus is what status, the console and `endpoints list` show
// of one endpoint.
type EndpointStatus struct {
	Name string `json:"name"`
	// URL is the endpoint's address as [Endpoint.DisplayURL] shows it:
	// scheme and host (its path and query may carry a token).
	URL         string   `json:"url"`
	Subjects    []string `json:"subjects"`
	Ordered     bool     `json:"ordered"`
	Rate        float64  `json:"rate,omitempty"`
	Concurrency int      `json:"concurrency"`
	// State is enabled, failing (enabled, every attempt failing since
	// FailingSince) or disabled (DisabledReason says why).
	State          string     `json:"state"`
	FailingSince   *time.Time `json:"failing_since,omitempty"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	StateChangedAt *time.Time `json:"state_changed_at,omitempty"`
	// Owner is the instance reading it ("" when none holds its lease).
	Owner string `json:"owner,omitempty"`
	// Backlog is what it has not been sent yet: Pending (in EVENTS, not
	// read), AckPending (read, not settled) and Tracked (in Postgres:
	// failing, parked, requeued or replayed; Failing of them failed at
	// least once).
	Backlog    uint64 `json:"backlog"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
	Tracked    int    `json:"tracked"`
	Failing    int    `json:"failing"`
	// Paused says whether its durable is paused (disabled).
	Paused bool `json:"paused"`
	// DeadLetters are its unresolved dead letters.
	DeadLetters      int        `json:"dead_letters"`
	OldestDeadLetter *time.Time `json:"oldest_dead_letter,omitempty"`
	// InfoErr is why the durable's state could not be read ("" when it
	// was).
	InfoErr string `json:"info_error,omitempty"`
}

// Status returns the state of each endpoint, as every instance sees it.
func Status(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, endpoints []Endpoint) ([]EndpointStatus, error) {
	rows, err := store.DeliveryEndpointList(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("delivery status: %w", err)
	}
	pending, err := store.DeliveryPendingCount(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("delivery status: %w", err)
	}
	dead, err := store.DeliveryDeadLetterCount(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("delivery status: %w", err)
	}
	out := make([]EndpointStatus, 0, len(endpoints))
	for _, e := range endpoints {
		e = e.WithDefaults()
		st := EndpointStatus{Name: e.Name, URL: e.DisplayURL(), Subjects: e.Subjects, Ordered: e.Ordered, Rate: e.Rate,
			Concurrency: e.Concurrency, State: StateEnabled}
		for _, r := range rows {
			if r.Name != e.Name {
				continue
			}
			at := r.StateChangedAt
			st.StateChangedAt, st.DisabledReason, st.FailingSince = &at, r.DisabledReason, r.FailingSince
			switch {
			case r.State == store.DeliveryDisabled:
				st.State = StateDisabled
			case r.FailingSince != nil:
				st.State = StateFailing
			}
			if r.Leased {
				st.Owner = r.Owner
			}
		}
		for _, p := range pending {
			if p.Endpoint == e.Name {
				st.Tracked, st.Failing = p.Count, p.Failing
			}
		}
		for _, d := range dead {
			if d.Endpoint == e.Name {
				oldest := d.Oldest
				st.DeadLetters, st.OldestDeadLetter = d.Count, &oldest
			}
		}
		info, err := js.Consumer(ctx, stream.Events, ConsumerName(e.Name))
		var ci *jetstream.ConsumerInfo
		if err == nil {
			ci, err = info.Info(ctx)
		}
		switch {
		case err == nil:
			st.Pending, st.AckPending, st.Paused = ci.NumPending, ci.NumAckPending, ci.Paused
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			// Not read yet: nothing pending for it.
		default:
			st.InfoErr = err.Error()
		}
		st.Backlog = st.Pending + uint64(st.AckPending) + uint64(st.Tracked)
		out = append(out, st)
	}
	return out, nil
}

// redactURL keeps an endpoint URL's scheme and host: its path and its
// query may carry a token. A path is shown as "/…".
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	out := &url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return out.String() + "/…"
	}
	return out.String() + u.Path
}

// Orphans returns the durables on EVENTS of endpoints not in configured
// (renamed or removed): each keeps the events it has not acked. A
// renamed endpoint is a new durable, which starts at new events.
func Orphans(ctx context.Context, js jetstream.JetStream, configured []string) ([]string, error) {
	st, err := js.Stream(ctx, stream.Events)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("delivery orphans: %w", err)
	}
	names := st.ConsumerNames(ctx)
	var out []string
	for n := range names.Name() {
		if len(n) > len(ConsumerPrefix) && n[:len(ConsumerPrefix)] == ConsumerPrefix && !slices.Contains(configured, n[len(ConsumerPrefix):]) {
			out = append(out, n)
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("delivery orphans: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// RequeueOptions select the dead letters a [Requeue] or a [Discard]
// acts on.
type RequeueOptions struct {
	// Filter selects them: by ids, or by endpoint, event id, subject and
	// time (unresolved ones only).
	Filter store.DeliveryDeadLetterFilter
	// OutOfOrder requeues, on an ordered endpoint, a dead letter a later
	// event of its key has passed (it would reach the endpoint after that
	// later event).
	OutOfOrder bool
	// DryRun counts without acting.
	DryRun bool
	// Endpoints are the configured endpoints' names (nil: not checked):
	// a requeue refuses a dead letter of any other, since no reader
	// would send what it queues.
	Endpoints []string
}

// RequeueResult counts what a [Requeue] or a [Discard] did.
type RequeueResult struct {
	// Matched is how many unresolved dead letters the filter selected.
	Matched int `json:"matched"`
	// Done are those requeued (or discarded); in a dry run, those that
	// would be.
	Done []int64 `json:"done"`
	// Refused are dead letters of ordered endpoints a later event of
	// their key has passed (requeue them with OutOfOrder).
	Refused []int64 `json:"refused,omitempty"`
	// NotConfigured are dead letters of endpoints no longer configured,
	// not requeued (nothing would send them; discard them).
	NotConfigured []int64 `json:"not_configured,omitempty"`
	// Raced are those another action resolved meanwhile.
	Raced  []int64 `json:"raced,omitempty"`
	DryRun bool    `json:"dry_run,omitempty"`
}

// Requeue sends the selected dead letters again through their endpoint's
// reader: with the same webhook-id, a fresh schedule, the body kept in
// the dead letter, and the endpoint's rate limit and concurrency. Each is
// requeued once however many requeues race (the others find it resolved
// and do nothing), and delivered once per requeue. On an ordered endpoint
// a dead letter a later event of its key has passed is refused unless
// OutOfOrder; one not passed is delivered before the later events of its
// key that are not sent yet.
func Requeue(ctx context.Context, pool *pgxpool.Pool, o RequeueOptions) (RequeueResult, error) {
	dls, err := selectDeadLetters(ctx, pool, o.Filter)
	if err != nil {
		return RequeueResult{}, fmt.Errorf("requeue: %w", err)
	}
	res := RequeueResult{Matched: len(dls), DryRun: o.DryRun, Done: []int64{}}
	var ids []int64
	for _, d := range dls {
		if o.Endpoints != nil && !slices.Contains(o.Endpoints, d.Endpoint) {
			res.NotConfigured = append(res.NotConfigured, d.ID)
			continue
		}
		if d.PassedAt != nil && !o.OutOfOrder {
			res.Refused = append(res.Refused, d.ID)
			continue
		}
		ids = append(ids, d.ID)
	}
	if o.DryRun || len(ids) == 0 {
		res.Done = append(res.Done, ids...)
		return res, nil
	}
	done, err := store.DeliveryDeadLetterRequeue(ctx, pool, ids, o.OutOfOrder)
	if err != nil {
		return RequeueResult{}, fmt.Errorf("requeue: %w", err)
	}
	res.Done, res.Raced = done, missing(ids, done)
	// A requeue queued behind its key's last row as that row ended is
	// made due now (the row's end could not see it).
	var endpoints, keys []string
	for _, d := range dls {
		if d.OrderingKey != "" && slices.Contains(done, d.ID) {
			endpoints, keys = append(endpoints, d.Endpoint), append(keys, d.OrderingKey)
		}
	}
	if len(keys) > 0 {
		if err := store.DeliveryPendingPromoteHeads(ctx, pool, endpoints, keys); err != nil {
			// Requeued all the same: res says which. Only a requeue that
			// raced its key's last row may wait for a later event of its key.
			return res, fmt.Errorf("requeue: requeued %d, but making them due failed: %w", len(done), err)
		}
	}
	return res, nil
}

// Discard resolves the selected dead letters without sending them.
func Discard(ctx context.Context, pool *pgxpool.Pool, o RequeueOptions) (RequeueResult, error) {
	dls, err := selectDeadLetters(ctx, pool, o.Filter)
	if err != nil {
		return RequeueResult{}, fmt.Errorf("discard: %w", err)
	}
	res := RequeueResult{Matched: len(dls), DryRun: o.DryRun, Done: []int64{}}
	ids := make([]int64, 0, len(dls))
	for _, d := range dls {
		ids = append(ids, d.ID)
	}
	if o.DryRun || len(ids) == 0 {
		res.Done = append(res.Done, ids...)
		return res, nil
	}
	done, err := store.DeliveryDeadLetterDiscard(ctx, pool, ids)
	if err != nil {
		return RequeueResult{}, fmt.Errorf("discard: %w", err)
	}
	res.Done, res.Raced = done, missing(ids, done)
	return res, nil
}

// selectDeadLetters reads the unresolved dead letters f selects; a
// filter that names nothing is refused (it would select every one).
func selectDeadLetters(ctx context.Context, pool *pgxpool.Pool, f store.DeliveryDeadLetterFilter) ([]store.DeliveryDeadLetter, error) {
	if len(f.IDs) == 0 && f.Endpoint == "" && f.EventID == "" && f.Subject == "" && f.Since.IsZero() && f.Until.IsZero() {
		return nil, errors.New("name dead letters by id, or an endpoint, an event id, a subject or a time range")
	}
	f.Resolved = false
	return store.DeliveryDeadLetterFind(ctx, pool, f)
}

func missing(asked, done []int64) []int64 {
	var out []int64
	for _, id := range asked {
		if !slices.Contains(done, id) {
			out = append(out, id)
		}
	}
	return out
}

// History is an event's delivery history: its attempts on every
// endpoint, what Postgres still tracks of it, and its dead letters.
type History struct {
	Attempts    []store.DeliveryAttempt    `json:"attempts"`
	Pending     []store.DeliveryPending    `json:"pending"`
	DeadLetters []store.DeliveryDeadLetter `json:"dead_letters"`
}

// EventHistory returns event eventID's delivery history (its webhook-id,
// the outbox message's id).
func EventHistory(ctx context.Context, pool *pgxpool.Pool, eventID string) (History, error) {
	var h History
	var err error
	if h.Attempts, err = store.DeliveryAttemptListForEvent(ctx, pool, "", eventID); err != nil {
		return History{}, fmt.Errorf("delivery history of %s: %w", eventID, err)
	}
	if h.Pending, err = store.DeliveryPendingListForEvent(ctx, pool, eventID); err != nil {
		return History{}, fmt.Errorf("delivery history of %s: %w", eventID, err)
	}
	if h.DeadLetters, err = store.DeliveryDeadLetterFind(ctx, pool, store.DeliveryDeadLetterFilter{EventID: eventID, Resolved: true}); err != nil {
		return History{}, fmt.Errorf("delivery history of %s: %w", eventID, err)
	}
	return h, nil
}
