package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
)

// DefaultMaxDeliver is how many deliveries a message gets before it is
// dead-lettered, when the options name none.
const DefaultMaxDeliver = 10

// IsTransient reports whether err says the database was unreachable or
// asked for a retry, rather than that the event itself cannot be applied:
// connection failures and drops, serialization failures (40001),
// deadlocks (40P01), shutdowns (57P01–57P03), connection exceptions (08*),
// too many connections (53300), a transaction that could not even begin,
// and a database that did not answer a ping after a failure. Failures like
// these never count toward dead-lettering. An error marked [consumer.Permanent] is
// never transient.
func IsTransient(err error) bool {
	if err == nil || consumer.IsPermanent(err) {
		return false
	}
	// Nothing of the event had been sent yet, or the database was found
	// not answering: whatever the error says (often only a deadline), it
	// was not the event's fault.
	if errors.Is(err, errBeginFailed) || errors.Is(err, errUnreachable) {
		return true
	}
	// Not getting a connection is never the event's fault, whatever the
	// server said (it wraps a PgError such as 55000 "database is not
	// currently accepting connections"), so this comes first.
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientSQLState(pgErr.Code)
	}
	// A handler that ran out of time is not an outage by itself; the
	// caller checks reachability before it dead-letters one.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	for _, target := range []error{pgconn.ErrConnClosed, io.EOF, io.ErrUnexpectedEOF,
		syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.EPIPE, net.ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

func transientSQLState(code string) bool {
	switch code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"57P01", // admin_shutdown (pg_terminate_backend, smart/fast shutdown)
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now (starting up, recovering)
		"53300": // too_many_connections
		return true
	}
	return strings.HasPrefix(code, "08") // connection_exception class
}

// errBeginFailed marks a failure to begin the apply transaction: the
// database is unreachable, hung or out of connections.
var errBeginFailed = errors.New("begin transaction")

// errUnreachable marks a failure after which the database did not answer
// a ping either.
var errUnreachable = errors.New("postgres did not answer a ping")

// intakeGate pauses a runner's pulls while the database is unreachable.
// A worker that sees a transient failure closes it; the pull loop then
// waits, pinging with backoff, and resumes once a ping succeeds. While
// closed nothing new is pulled, so an outage costs at most the messages
// already buffered or in flight, each nak'd with its backoff delay once:
// no tight nak loop and no redelivery storm.
type intakeGate struct {
	closed atomic.Bool
	ping   func(ctx context.Context) error
	log    *slog.Logger
	name   string
	// initial and max bound the delay between pings.
	initial, max time.Duration
}

func newIntakeGate(name string, ping func(ctx context.Context) error, log *slog.Logger) *intakeGate {
	return &intakeGate{ping: ping, log: log, name: name, initial: 100 * time.Millisecond, max: 10 * time.Second}
}

// close asks the pull loop to check the database before pulling again.
func (g *intakeGate) close() { g.closed.Store(true) }

// wait returns at once when the gate is open. Otherwise it pings until the
// database answers or ctx ends, then opens the gate.
func (g *intakeGate) wait(ctx context.Context) {
	if !g.closed.Load() {
		return
	}
	delay := g.initial
	start := time.Now()
	paused := false
	for ctx.Err() == nil {
		if err := g.pingOnce(ctx); err == nil {
			break
		} else if !paused {
			paused = true
			g.log.Warn("postgres unreachable; intake paused", "consumer", g.name, "err", errtext.ForLog(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, g.max)
	}
	g.closed.Store(false)
	if paused && ctx.Err() == nil {
		g.log.Info("postgres reachable again; intake resumed", "consumer", g.name, "paused_for", time.Since(start).Round(time.Millisecond))
	}
}

func (g *intakeGate) pingOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return g.ping(ctx)
}

// onFailure decides what happens to a message whose apply failed: dead
// letter (permanent, or its max_deliver-th failure that is not the
// database's), or nak with the backoff delay. A transient failure also
// pauses intake until the database answers again.
//
// Only failures that are not transient are counted toward max_deliver, in
// the message's counter in hookbridge.delivery_failures (see failures.go):
// JetStream's delivery count includes every redelivery after a deadlock,
// a lost connection, an outage or an ack timeout.
func (c *Consumer) onFailure(ctx context.Context, ev consumer.Event, err error, attrs []any) action {
	retry := action{kind: nak, delay: c.backoff(ev.NumDelivered)}
	attrs = append(attrs, "err", errtext.ForLog(err)) // values masked: a log holds no body
	switch {
	case consumer.IsPermanent(err) && !c.opts.takesType(ev.Type):
		// Stored on a subject the consumer's filter dropped, before the
		// change (narrowing.go): it is applied like every message accepted
		// before, and a handler without code for the type refuses it.
		requeue := "requeue this dead letter"
		if ev.OrderingKey != "" {
			// Its key goes on: a later event of it marks this one passed.
			requeue += " (with --out-of-order once a later event of its key has passed it)"
		}
		return c.deadLetter(ctx, ev, ReasonTypeDropped, fmt.Errorf(
			"event type %q is no longer one of consumer %s's event types (the configuration dropped it after the event was accepted; "+
				"for a consumerName declared in SQL, its apply statement was removed): restore it and %s, or discard it: %w",
			ev.Type, c.opts.Name, requeue, err))
	case consumer.IsPermanent(err):
		return c.deadLetter(ctx, ev, ReasonPermanent, err)
	case IsTransient(err):
		c.gate.close()
		c.opts.Logger.Warn("event failed on a transient database error, will retry", append(attrs, "retry_in", retry.delay)...)
		return retry
	case c.opts.MaxDeliver <= 0:
		c.opts.Logger.Warn("event failed, will retry", append(attrs, "retry_in", retry.delay)...)
		return retry
	}
	n, cerr := countFailure(ctx, c.pool, c.opts.Name, ev, err, min(c.opts.HandlerTimeout, countTimeout))
	if cerr != nil {
		// A database that cannot take one small upsert is in trouble
		// (this is how a timed-out apply on a hung database ends): retry
		// without counting, and let the gate find out when it is back.
		c.gate.close()
		c.opts.Logger.Warn("event failed and the failure could not be counted, will retry",
			append(attrs, "count_err", errtext.ForLog(cerr), "retry_in", retry.delay)...)
		return retry
	}
	if n == 0 {
		// Another delivery of this message applied or dead-lettered it:
		// it is settled. (Retried instead, a keyed event whose dead
		// letter exists would be retried in place for ever.)
		c.opts.Logger.Debug("event failed after another delivery settled it", attrs...)
		return action{kind: ack}
	}
	attrs = append(attrs, "failures", n)
	if n >= c.opts.MaxDeliver {
		return c.deadLetter(ctx, ev, ReasonMaxDeliver, err)
	}
	c.opts.Logger.Warn("event failed, will retry", append(attrs, "retry_in", retry.delay)...)
	return retry
}

// onPostponed decides what happens to an event its handler postponed
// ([consumer.Postpone]): tried again (keyed: after the key's next event,
// else after the backoff; unkeyed: nak'd with the backoff), or
// dead-lettered once it has waited for longer than PostponeLimit since it
// was first postponed. Postponements never count toward max_deliver.
// passedBy is a later event of its key that applied in the same batch (nil:
// none): its dead letter, if it becomes one, is passed.
func (c *Consumer) onPostponed(ctx context.Context, ev consumer.Event, err error, passedBy *store.PassingEvent, attrs []any) action {
	retry := action{kind: postpone, delay: c.backoff(ev.NumDelivered)}
	attrs = append(attrs, "err", errtext.ForLog(err))
	since, nerr := notePostponed(ctx, c.pool, c.opts.Name, ev, err, passedBy, min(c.opts.HandlerTimeout, countTimeout))
	switch {
	case nerr != nil:
		c.gate.close()
		c.opts.Logger.Warn("event postponed and the postponement could not be recorded, will retry",
			append(attrs, "note_err", errtext.ForLog(nerr), "retry_in", retry.delay)...)
		return action{kind: nak, delay: retry.delay}
	case since.IsZero():
		c.opts.Logger.Debug("event postponed after another delivery settled it", attrs...)
		return action{kind: ack}
	case time.Since(since) > c.opts.PostponeLimit:
		return c.deadLetter(ctx, ev, ReasonPostponed,
			fmt.Errorf("postponed for %s, longer than postpone_limit %s: %w", time.Since(since).Round(time.Millisecond), c.opts.PostponeLimit, err))
	}
	c.opts.Logger.Debug("event postponed until a later event of its key", append(attrs, "postponed_for", time.Since(since).Round(time.Millisecond))...)
	return retry
}
