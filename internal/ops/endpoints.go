package ops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/internal/delivery"
	"github.com/hookbridge/hookbridge/internal/store"
)

// The operator views of outgoing delivery (docs/DELIVERY.md,
// "Operations"): each reads through package delivery, and the command
// line, the admin API and the console print the same shapes.

// EndpointStatus is one endpoint in status and `endpoints list`: its
// state, owner, backlog and dead letters.
type EndpointStatus = delivery.EndpointStatus

// EndpointAttempt is one HTTP attempt of an event to an endpoint.
type EndpointAttempt = store.DeliveryAttempt

// EndpointDeadLetter is a delivery that failed its endpoint's whole
// schedule.
type EndpointDeadLetter = store.DeliveryDeadLetter

// EndpointPending is a delivery Postgres tracks: failing, parked behind an
// earlier event of its key, requeued or replayed.
type EndpointPending = store.DeliveryPending

// TestResult is the answer to `endpoints test`.
type TestResult = delivery.TestResult

// EndpointReplayResult counts what a replay to an endpoint did.
type EndpointReplayResult = delivery.ReplayResult

// EndpointReplaySelector selects the events a replay to an endpoint sends.
type EndpointReplaySelector = delivery.ReplaySelector

// EndpointTriageResult counts what a requeue or a discard of delivery
// dead letters did.
type EndpointTriageResult = delivery.RequeueResult

// RecentAttemptsShown is how many of an endpoint's latest attempts its
// view lists.
const RecentAttemptsShown = 50

// EndpointView is one endpoint in `endpoints show` and its console page:
// its status, its latest attempts (newest first) and its unresolved dead
// letters (oldest first).
type EndpointView struct {
	EndpointStatus
	RecentAttempts []EndpointAttempt    `json:"recent_attempts"`
	DeadLetterList []EndpointDeadLetter `json:"dead_letter_list"`
}

// EndpointChange is the answer to `endpoints disable|enable`.
type EndpointChange struct {
	Endpoint string `json:"endpoint"`
	State    string `json:"state"`
	// Changed is false when the endpoint was in that state already.
	Changed bool `json:"changed"`
}

// DeliveryHistory is one event's delivery history (by its webhook-id, the
// outbox message's id), per endpoint.
type DeliveryHistory struct {
	EventID   string                    `json:"event_id"`
	Endpoints []EndpointDeliveryHistory `json:"endpoints"`
}

// EndpointDeliveryHistory is an event's history at one endpoint: its
// attempts (oldest first), the delivery Postgres still tracks (nil:
// none) and its dead letters, resolved ones included.
type EndpointDeliveryHistory struct {
	Endpoint string `json:"endpoint"`
	// State is the event's state there: delivered (its last attempt
	// succeeded), pending (Postgres tracks it: failing, waiting behind an
	// earlier event of its key, requeued or replayed), dead_lettered (an
	// unresolved dead letter), failed (attempted, not delivered, nothing
	// left to do: a dead letter discarded) or in_flight (attempted and
	// failed, its retry held by the endpoint's reader).
	State       string               `json:"state"`
	Attempts    []EndpointAttempt    `json:"attempts"`
	Pending     *EndpointPending     `json:"pending,omitempty"`
	DeadLetters []EndpointDeadLetter `json:"dead_letters"`
}

// endpointsErr is why some configured endpoints could not be read (a
// secret missing), so that an action on one says why.
func (o *Ops) endpointsErr() error {
	if o.EndpointsErr != nil {
		return fmt.Errorf("delivery endpoints: %w", o.EndpointsErr)
	}
	return nil
}

// endpoint returns the configured endpoint called name.
func (o *Ops) endpoint(name string) (delivery.Endpoint, error) {
	for _, e := range o.Endpoints {
		if e.Name == name {
			return e, nil
		}
	}
	if err := o.endpointsErr(); err != nil {
		return delivery.Endpoint{}, fmt.Errorf("endpoint %q: %w: %w", name, ErrNotFound, err)
	}
	names := make([]string, 0, len(o.Endpoints))
	for _, e := range o.Endpoints {
		names = append(names, e.Name)
	}
	return delivery.Endpoint{}, fmt.Errorf("endpoint %q is not configured (have: %s): %w", name, strings.Join(names, ", "), ErrNotFound)
}

// EndpointList returns the state of every configured endpoint.
func (o *Ops) EndpointList(ctx context.Context) ([]EndpointStatus, error) {
	if o.JS == nil {
		return nil, errNoJetStream
	}
	st, err := delivery.Status(ctx, o.Pool, o.JS, o.Endpoints)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Endpoint returns endpoint name's view.
func (o *Ops) Endpoint(ctx context.Context, name string) (EndpointView, error) {
	e, err := o.endpoint(name)
	if err != nil {
		return EndpointView{}, err
	}
	if o.JS == nil {
		return EndpointView{}, errNoJetStream
	}
	st, err := delivery.Status(ctx, o.Pool, o.JS, []delivery.Endpoint{e})
	if err != nil {
		return EndpointView{}, err
	}
	v := EndpointView{EndpointStatus: st[0]}
	if v.RecentAttempts, err = store.DeliveryAttemptListRecent(ctx, o.Pool, name, RecentAttemptsShown); err != nil {
		return EndpointView{}, fmt.Errorf("endpoint %s: attempts: %w", name, err)
	}
	if v.DeadLetterList, err = store.DeliveryDeadLetterFind(ctx, o.Pool, store.DeliveryDeadLetterFilter{Endpoint: name}); err != nil {
		return EndpointView{}, fmt.Errorf("endpoint %s: dead letters: %w", name, err)
	}
	if v.RecentAttempts == nil {
		v.RecentAttempts = []EndpointAttempt{}
	}
	if v.DeadLetterList == nil {
		v.DeadLetterList = []EndpointDeadLetter{}
	}
	return v, nil
}

// EndpointTest posts one signed test event to endpoint name (nothing is
// recorded or retried).
func (o *Ops) EndpointTest(ctx context.Context, name string) (TestResult, error) {
	e, err := o.endpoint(name)
	if err != nil {
		return TestResult{}, err
	}
	if o.Sign == nil {
		return TestResult{}, fmt.Errorf("endpoint %s: no signer: %w", name, ErrUnsupported)
	}
	return delivery.SendTest(ctx, e, o.Sign, nil), nil
}

// EndpointDisable disables endpoint name: its events wait until it is
// enabled.
func (o *Ops) EndpointDisable(ctx context.Context, name, reason string) (EndpointChange, error) {
	if _, err := o.endpoint(name); err != nil {
		return EndpointChange{}, err
	}
	if o.JS == nil {
		return EndpointChange{}, errNoJetStream
	}
	changed, err := delivery.Disable(ctx, o.Pool, o.JS, name, reason)
	if err != nil {
		return EndpointChange{}, err
	}
	return EndpointChange{Endpoint: name, State: delivery.StateDisabled, Changed: changed}, nil
}

// EndpointEnable enables endpoint name again; it resumes where it
// stopped.
func (o *Ops) EndpointEnable(ctx context.Context, name string) (EndpointChange, error) {
	if _, err := o.endpoint(name); err != nil {
		return EndpointChange{}, err
	}
	if o.JS == nil {
		return EndpointChange{}, errNoJetStream
	}
	changed, err := delivery.Enable(ctx, o.Pool, o.JS, name)
	if err != nil {
		return EndpointChange{}, err
	}
	return EndpointChange{Endpoint: name, State: delivery.StateEnabled, Changed: changed}, nil
}

// EndpointReplay sends the events sel selects to endpoint name again
// through stream redelivery (only counts them, dryRun).
func (o *Ops) EndpointReplay(ctx context.Context, name string, sel EndpointReplaySelector, dryRun bool) (EndpointReplayResult, error) {
	e, err := o.endpoint(name)
	if err != nil {
		return EndpointReplayResult{}, err
	}
	if o.JS == nil {
		return EndpointReplayResult{}, errNoJetStream
	}
	if sel.FromSeq == 0 && sel.ToSeq == 0 && sel.Since.IsZero() && sel.Until.IsZero() && sel.Subject == "" && len(sel.EventIDs) == 0 {
		return EndpointReplayResult{}, fmt.Errorf("replay to %s: select events by sequence, time, subject or event id: %w", name, ErrInvalid)
	}
	return delivery.Replay(ctx, o.Pool, o.JS, e, sel, dryRun)
}

// EndpointDeadLetterFilter selects delivery dead letters.
type EndpointDeadLetterFilter struct {
	IDs      []int64
	Endpoint string
	EventID  string
	Subject  string
	// Since and Until bound when they were written ([Since, Until)).
	Since, Until time.Time
	// Resolved includes requeued and discarded ones (list only).
	Resolved bool
	Limit    int
}

func (f EndpointDeadLetterFilter) store() store.DeliveryDeadLetterFilter {
	return store.DeliveryDeadLetterFilter{IDs: f.IDs, Endpoint: f.Endpoint, EventID: f.EventID, Subject: f.Subject,
		Since: f.Since, Until: f.Until, Resolved: f.Resolved, Limit: f.Limit}
}

// EndpointDeadLetters lists the delivery dead letters f selects, oldest
// first (an endpoint no longer configured keeps its dead letters: they
// are listed, and discarded, by its name too).
func (o *Ops) EndpointDeadLetters(ctx context.Context, f EndpointDeadLetterFilter) ([]EndpointDeadLetter, error) {
	out, err := store.DeliveryDeadLetterFind(ctx, o.Pool, f.store())
	if err != nil {
		return nil, fmt.Errorf("delivery dead letters: %w", err)
	}
	if out == nil {
		out = []EndpointDeadLetter{}
	}
	return out, nil
}

// EndpointDeadLettersRequeue sends the selected dead letters again
// (outOfOrder: also those a later event of their key has passed).
func (o *Ops) EndpointDeadLettersRequeue(ctx context.Context, f EndpointDeadLetterFilter, outOfOrder, dryRun bool) (EndpointTriageResult, error) {
	if err := o.checkTriage(f, true); err != nil {
		return EndpointTriageResult{}, err
	}
	names := make([]string, 0, len(o.Endpoints))
	for _, e := range o.Endpoints {
		names = append(names, e.Name)
	}
	return delivery.Requeue(ctx, o.Pool, delivery.RequeueOptions{Filter: f.store(), OutOfOrder: outOfOrder, DryRun: dryRun, Endpoints: names})
}

// EndpointDeadLettersDiscard resolves the selected dead letters without
// sending them.
func (o *Ops) EndpointDeadLettersDiscard(ctx context.Context, f EndpointDeadLetterFilter, dryRun bool) (EndpointTriageResult, error) {
	if err := o.checkTriage(f, false); err != nil {
		return EndpointTriageResult{}, err
	}
	return delivery.Discard(ctx, o.Pool, delivery.RequeueOptions{Filter: f.store(), DryRun: dryRun})
}

// checkTriage refuses a selection that names nothing (it would act on
// every dead letter) and, for a requeue (configured), an endpoint not
// configured: nothing would send what it queues (a selection by id,
// event, subject or time leaves such dead letters out: NotConfigured). A
// removed endpoint's dead letters can still be discarded.
func (o *Ops) checkTriage(f EndpointDeadLetterFilter, configured bool) error {
	if len(f.IDs) == 0 && f.Endpoint == "" && f.EventID == "" && f.Subject == "" && f.Since.IsZero() && f.Until.IsZero() {
		return fmt.Errorf("name dead letters by id, or an endpoint, an event id, a subject or a time range: %w", ErrInvalid)
	}
	if configured && f.Endpoint != "" {
		if _, err := o.endpoint(f.Endpoint); err != nil {
			return err
		}
	}
	return nil
}

// DeliveryHistory returns event eventID's delivery history per endpoint
// (the webhook-id the endpoints receive: the outbox message's id). An
// event no endpoint has heard of has no endpoints.
func (o *Ops) DeliveryHistory(ctx context.Context, eventID string) (DeliveryHistory, error) {
	h, err := delivery.EventHistory(ctx, o.Pool, eventID)
	if err != nil {
		return DeliveryHistory{}, err
	}
	byName := map[string]*EndpointDeliveryHistory{}
	at := func(name string) *EndpointDeliveryHistory {
		if e, ok := byName[name]; ok {
			return e
		}
		e := &EndpointDeliveryHistory{Endpoint: name, Attempts: []EndpointAttempt{}, DeadLetters: []EndpointDeadLetter{}}
		byName[name] = e
		return e
	}
	for _, a := range h.Attempts {
		e := at(a.Endpoint)
		e.Attempts = append(e.Attempts, a)
	}
	for _, p := range h.Pending {
		at(p.Endpoint).Pending = &p
	}
	for _, d := range h.DeadLetters {
		e := at(d.Endpoint)
		e.DeadLetters = append(e.DeadLetters, d)
	}
	out := DeliveryHistory{EventID: eventID, Endpoints: make([]EndpointDeliveryHistory, 0, len(byName))}
	for _, e := range byName {
		e.State = deliveryState(e)
		out.Endpoints = append(out.Endpoints, *e)
	}
	slices.SortFunc(out.Endpoints, func(a, b EndpointDeliveryHistory) int { return cmp.Compare(a.Endpoint, b.Endpoint) })
	return out, nil
}

// Delivery states of an event at an endpoint ([EndpointDeliveryHistory]).
const (
	DeliveryDelivered    = "delivered"
	DeliveryPending      = "pending"
	DeliveryDeadLettered = "dead_lettered"
	DeliveryFailed       = "failed"
	DeliveryInFlight     = "in_flight"
)

func deliveryState(e *EndpointDeliveryHistory) string {
	switch {
	case e.Pending != nil:
		return DeliveryPending
	case slices.ContainsFunc(e.DeadLetters, func(d EndpointDeadLetter) bool { return d.ResolvedAt == nil }):
		return DeliveryDeadLettered
	}
	if n := len(e.Attempts); n > 0 && AttemptClass(e.Attempts[n-1]) == "2xx" {
		return DeliveryDelivered
	}
	if slices.ContainsFunc(e.DeadLetters, func(d EndpointDeadLetter) bool { return d.RedeliveredAt != nil }) {
		return DeliveryDelivered
	}
	if len(e.DeadLetters) > 0 {
		return DeliveryFailed
	}
	return DeliveryInFlight
}

// AttemptClass is an attempt's outcome class as the delivery metrics
// count it (2xx, 4xx, timeout, connect, ...).
func AttemptClass(a EndpointAttempt) string { return delivery.StatusClass(a.StatusCode, a.ErrorClass) }
