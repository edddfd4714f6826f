package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// NotifyChannel is the Postgres channel the outbox insert trigger notifies
// (migration 0002) and relays listen on.
const NotifyChannel = "hookbridge_outbox"

// Defaults of [Options].
const (
	// DefaultBatchSize bounds a round, which only matters with a
	// backlog: rounds are woken by each commit's NOTIFY and take what is
	// ready, so at low rates they are small whatever the bound. 1024 drains
	// a backlog 1.2-1.5x faster than 256 (BenchmarkRelay) for fewer
	// commits per row.
	DefaultBatchSize      = 1024
	DefaultPollInterval   = 5 * time.Second
	DefaultMaxAttempts    = 20
	DefaultBackoffBase    = 500 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Minute
	DefaultPublishTimeout = 10 * time.Second
	// DefaultRetention keeps sent rows a day: long enough to look at what
	// went out yesterday and far beyond the duplicate window and any
	// handler retry, at a size a high-rate outbox can afford (docs/OUTBOX.md,
	// "Size"). Re-applying the same incoming event is stopped by the
	// inbox, not by these rows.
	DefaultRetention = 24 * time.Hour
	// PurgeBatchSize is how many rows one retention step reads (and at
	// most deletes).
	PurgeBatchSize = 1000
)

// ErrNotConnected is returned by [Relay.RunOnce] when the NATS connection
// is down. The relay then claims nothing, so an outage costs no attempts.
var ErrNotConnected = errors.New("relay: NATS connection is not connected")

// Options tune a [Relay]. Zero values mean the defaults
// ([Options.WithDefaults]); a negative value is refused, naming the option
// ([Options.Validate]), except Retention's, which keeps sent rows.
type Options struct {
	// BatchSize is how many rows one round claims and publishes (1024).
	BatchSize int
	// PollInterval is the safety-net poll when no NOTIFY arrives (5s).
	PollInterval time.Duration
	// MaxAttempts is how many failed publishes make a row 'dead' (20).
	MaxAttempts int
	// BackoffBase and BackoffMax bound the capped exponential backoff with
	// jitter between attempts of one row (500ms, 5m). After an ambiguous
	// failure (timeout, lost connection: the message may be stored) the
	// delay is also capped at half the stream's duplicate window, so the
	// retry is de-duplicated by JetStream instead of stored twice.
	BackoffBase, BackoffMax time.Duration
	// PublishTimeout bounds the wait for all PubAcks of a batch (10s).
	PublishTimeout time.Duration
	// Retention is how long sent rows are kept before they are deleted in
	// batches of [PurgeBatchSize] (24h). 0 keeps the default; a negative
	// value disables deletion.
	Retention time.Duration
	// DeleteSent deletes messages as they are published instead of keeping
	// them for Retention: the EVENTS stream is then the record of what was
	// sent. Sent rows written before (by a relay that kept them) are still
	// deleted after Retention.
	DeleteSent bool
	// Stream configures the EVENTS stream, created or updated before the
	// first publish.
	Stream stream.Options
	// Logger receives the relay's logs (slog.Default()).
	Logger *slog.Logger
	// Tracer, when set, observes each batch and each row's publish
	// (metrics, tracing); see observe.go.
	Tracer Tracer
}

// WithDefaults is o with every option it leaves at zero given its
// default (and BackoffMax raised to BackoffBase); negative values stay
// for [Options.Validate] to refuse. `hookbridge config check` prints the
// relay's settings through it, so that what it prints is what the relay
// runs with.
func (o Options) WithDefaults() Options {
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.BackoffMax > 0 && o.BackoffMax < o.BackoffBase {
		o.BackoffMax = o.BackoffBase
	}
	if o.PublishTimeout == 0 {
		o.PublishTimeout = DefaultPublishTimeout
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// OptionError is an option the relay refuses: which one (the field's name
// in [Options]) and why.
type OptionError struct {
	Option string // "BatchSize"
	Reason string // "-1 must not be negative"
}

func (e *OptionError) Error() string { return fmt.Sprintf("relay: %s: %s", e.Option, e.Reason) }

// Validate reports every option of o that the relay refuses, each as an
// [*OptionError], joined: a negative batch size, poll interval, number of
// attempts, backoff or publish timeout.
func (o Options) Validate() error {
	var errs []error
	for _, n := range []struct {
		option string
		value  int
	}{{"BatchSize", o.BatchSize}, {"MaxAttempts", o.MaxAttempts}} {
		if n.value < 0 {
			errs = append(errs, &OptionError{Option: n.option, Reason: fmt.Sprintf("%d must not be negative", n.value)})
		}
	}
	for _, d := range []struct {
		option string
		value  time.Duration
	}{{"PollInterval", o.PollInterval}, {"BackoffBase", o.BackoffBase}, {"BackoffMax", o.BackoffMax}, {"PublishTimeout", o.PublishTimeout}} {
		if d.value < 0 {
			errs = append(errs, &OptionError{Option: d.option, Reason: fmt.Sprintf("%s must not be negative", d.value)})
		}
	}
	return errors.Join(errs...)
}

// Relay publishes committed outbox rows to JetStream. Any number of relays
// may run against one database; see docs/OUTBOX.md.
type Relay struct {
	pool *pgxpool.Pool
	js   jetstream.JetStream // stream management
	pub  jetstream.JetStream // publishing: a private async-publish context
	opts Options
	log  *slog.Logger
	// invalid is what Options.Validate refused; the relay then runs
	// nothing.
	invalid error

	ensured atomic.Bool
	running atomic.Bool
	hooks   testHooks

	// One line when a failure starts, rate-limited repeats, one when it
	// ends: rounds, the LISTEN connection and retention fail (and
	// recover) separately.
	roundOutage, listenOutage, retainOutage *outageLog
}

// testHooks let tests inject failures; set only from export_test.go.
type testHooks struct {
	// beforePublish, when it returns an error, fails that row as if its
	// publish had been refused; nothing is sent.
	beforePublish func(eventID string) error
	// afterPublish runs after the batch's PubAcks were awaited and before
	// the outcome is written; an error rolls the transaction back, as if
	// the relay had crashed right there.
	afterPublish func(eventIDs []string) error
	// acked is called for every PubAck the relay receives.
	acked func(eventID string, ack *jetstream.PubAck)
	// listening is called each time the LISTEN connection is (re)established.
	listening func()
}

// NewRelay returns a relay that claims rows through pool and publishes them
// with js. Publishing uses a private async-publish context on js's
// connection, so its PubAck bookkeeping is not shared with other users of
// js; stream management uses js itself. Options out of range
// ([Options.Validate]) make [Relay.Run] and [Relay.RunOnce] fail at once.
func NewRelay(pool *pgxpool.Pool, js jetstream.JetStream, opts Options) *Relay {
	opts = opts.WithDefaults()
	r := &Relay{pool: pool, js: js, pub: js, opts: opts, invalid: opts.Validate(), log: opts.Logger.With("component", "outbox-relay")}
	r.setOutageRepeat(DefaultOutageRepeat)
	if nc := js.Conn(); nc != nil {
		pub, err := jetstream.New(nc,
			// Abandoned futures (PubAck never came) are dropped by the
			// library after this long instead of accumulating.
			jetstream.WithPublishAsyncTimeout(opts.PublishTimeout),
			jetstream.WithPublishAsyncMaxPending(max(4000, 4*opts.BatchSize)))
		if err == nil {
			r.pub = pub
		} else {
			r.log.Warn("private publish context unavailable, sharing the caller's", "err", err)
		}
	}
	return r
}

// Options are the options the relay runs with: those given to
// [NewRelay], with [Options.WithDefaults] applied.
func (r *Relay) Options() Options { return r.opts }

func (r *Relay) setOutageRepeat(d time.Duration) {
	r.roundOutage = newOutageLog(r.log, "outbox round", d)
	r.listenOutage = newOutageLog(r.log, "outbox listener", d)
	r.retainOutage = newOutageLog(r.log, "outbox retention", d)
}

// Run relays until ctx is done and returns nil then. It wakes on the
// outbox NOTIFY, keeps claiming while rows are ready, sleeps until the next
// retry is due or PollInterval passes, and deletes old sent rows. Errors
// (database or NATS unavailable) are logged and retried with backoff;
// options out of range are returned at once.
func (r *Relay) Run(ctx context.Context) error {
	if r.invalid != nil {
		return r.invalid
	}
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: relay is already running")
	}
	defer r.running.Store(false)

	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}

	var wg conc.WaitGroup
	bg, stop := context.WithCancel(ctx)
	defer wg.Wait()
	defer stop()
	wg.Go(func() { r.listen(bg, poke) })
	if r.opts.Retention > 0 {
		wg.Go(func() { r.retain(bg) })
	}
	if r.pub != r.js {
		defer r.pub.CleanupPublisher()
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for {
		res, err := r.round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		switch {
		case err != nil:
			failures++
			wait = min(r.backoff(failures), r.opts.PollInterval)
			r.roundOutage.fail(ctx, err, "retry_in", wait)
		case res.again():
			failures = 0
			r.roundOutage.ok(ctx)
			continue // keep draining while rows are ready
		default:
			failures = 0
			r.roundOutage.ok(ctx)
			wait = r.opts.PollInterval
			if res.heldElsewhere {
				wait = min(wait, r.opts.BackoffBase)
			}
			if d, ok, err := r.nextDue(ctx); err == nil && ok && d < wait {
				wait = max(d, time.Millisecond)
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-timer.C:
		}
	}
}

// RunOnce runs one claim-and-publish round and returns how many rows it
// marked sent. Rows whose publish failed are rescheduled (or made dead)
// and are not an error; an error means the round itself failed (database,
// NATS connection, stream creation) and nothing was written.
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	if r.invalid != nil {
		return 0, r.invalid
	}
	res, err := r.round(ctx)
	return res.published, err
}

// backoff is the capped exponential delay with jitter for the n-th
// consecutive failure (n >= 1): half of it fixed, half random.
func (r *Relay) backoff(n int) time.Duration {
	d := r.opts.BackoffBase
	for i := 1; i < n && d < r.opts.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, r.opts.BackoffMax)
	half := d / 2
	return half + rand.N(half+1)
}

// retryDelay is the delay before the next attempt of a row that has now
// failed `attempts` times.
func (r *Relay) retryDelay(attempts int, ambiguous bool) time.Duration {
	d := r.backoff(attempts)
	if ambiguous {
		// The message may be stored: retry inside the duplicate window so
		// JetStream recognises the Nats-Msg-Id instead of storing it twice.
		window := r.opts.Stream.DuplicateWindow
		if window <= 0 {
			window = stream.DefaultDuplicateWindow
		}
		d = min(d, window/2)
	}
	return d
}

// nextDue is how long until the earliest pending row that is not yet due
// becomes due.
func (r *Relay) nextDue(ctx context.Context) (time.Duration, bool, error) {
	ms, err := store.OutboxNextDue(ctx, r.pool)
	if err != nil || ms == nil {
		return 0, false, err
	}
	return time.Duration(*ms) * time.Millisecond, true, nil
}

// listen keeps a LISTEN connection open (reconnecting as needed) and pokes
// on every notification and after every (re)connect, since notifications
// sent while it was down are lost.
func (r *Relay) listen(ctx context.Context, poke func()) {
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			c, err := r.pool.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return c.Hijack(), nil
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				r.listenOutage.fail(ctx, err, "retry_in", min(time.Second, r.opts.PollInterval))
			}
		},
		ReconnectDelay: min(time.Second, r.opts.PollInterval),
	}
	listening := func() {
		r.listenOutage.ok(ctx)
		if r.hooks.listening != nil {
			r.hooks.listening()
		}
	}
	l.Handle(NotifyChannel, wakeHandler{poke: poke, listening: listening})
	_ = l.Listen(ctx) // returns only when ctx is done
}

type wakeHandler struct {
	poke      func()
	listening func()
}

func (h wakeHandler) HandleNotification(context.Context, *pgconn.Notification, *pgx.Conn) error {
	h.poke()
	return nil
}

// HandleBacklog runs right after LISTEN succeeds: rows committed while no
// one listened are picked up by the round it triggers.
func (h wakeHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	if h.listening != nil {
		h.listening()
	}
	h.poke()
	return nil
}

// retain deletes old sent rows now and then.
func (r *Relay) retain(ctx context.Context) {
	interval := min(max(r.opts.Retention/10, time.Minute), time.Hour)
	for {
		n, err := r.PurgeSent(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.retainOutage.fail(ctx, err, "retry_in", interval)
		} else {
			r.retainOutage.ok(ctx)
			if n > 0 {
				r.log.Info("outbox retention deleted sent rows", "rows", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// PurgeSent deletes sent messages older than Retention, rows and packs,
// and returns how many it deleted. Pending and dead messages are never
// deleted. With a negative Retention it does nothing.
//
// It walks each table by id from the oldest, [PurgeBatchSize] rows (or
// packs) per step, each delete its own short transaction that skips rows
// another purger holds, and stops at the first one created after the
// cutoff: ids follow creation time and a message is sent after it was
// created, so nothing past that one can be old enough. (One whose
// transaction began before the cutoff but drew its id after a newer one
// is left for a later pass, a delay of at most that transaction's
// length.) No index on sent_at is needed, which saves an index entry in
// every sent row; rows the walk passes without deleting (dead, pending,
// recently sent) are read once per pass.
func (r *Relay) PurgeSent(ctx context.Context) (int64, error) {
	if r.opts.Retention < 0 {
		return 0, nil
	}
	cutoff, err := store.Cutoff(ctx, r.pool, r.opts.Retention.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("purge sent outbox rows: %w", err)
	}
	rows, err := r.purgeWalk(ctx, cutoff, store.OutboxPurgeScan, store.OutboxPurgeDelete)
	if err != nil {
		return rows, fmt.Errorf("purge sent outbox rows: %w", err)
	}
	packed, err := r.purgeWalk(ctx, cutoff, store.OutboxPackPurgeScan, store.OutboxPackPurgeDelete)
	if err != nil {
		return rows + packed, fmt.Errorf("purge sent outbox packs: %w", err)
	}
	return rows + packed, nil
}

// purgeWalk is one table's walk of PurgeSent: scan reads the next rows by
// id, del deletes those still sent before the cutoff and returns how many
// messages went.
func (r *Relay) purgeWalk(ctx context.Context, cutoff time.Time,
	scan func(context.Context, store.Querier, int64, time.Time, int) ([]store.OutboxPurgeCandidate, error),
	del func(context.Context, store.Querier, []int64, time.Time) (int64, error)) (int64, error) {
	var total int64
	after := int64(0) // ids start at 1
	for {
		cands, err := scan(ctx, r.pool, after, cutoff, PurgeBatchSize)
		if err != nil {
			return total, fmt.Errorf("scan: %w", err)
		}
		var victims []int64
		stop := false
		for _, c := range cands {
			if c.Recent {
				stop = true
				break
			}
			after = c.ID
			if c.Expired {
				victims = append(victims, c.ID)
			}
		}
		if len(victims) > 0 {
			// The conditions are checked again under the row lock: a row
			// requeued or deleted since the scan is left alone.
			n, err := del(ctx, r.pool, victims, cutoff)
			if err != nil {
				return total, err
			}
			total += n
		}
		if stop || len(cands) < PurgeBatchSize {
			return total, nil
		}
	}
}
