// Package sqlconsumer is the handler of consumers declared in the
// configuration with SQL instead of Go:
//
//	consumers:
//	  - name: tickets
//	    event_types: [issues.opened, issues.closed]
//	    sql:
//	      migrations: ./migrations/tickets
//	      apply:
//	        issues.opened: INSERT INTO crm.tickets … VALUES (@body::jsonb #>> '{issue,id}', …)
//	        issues.closed:
//	          - UPDATE crm.tickets SET state = 'closed' WHERE …
//	          - SELECT hookbridge.enqueue(@consumer || ':' || @source || ':' || @event_id, 'events.crm.ticket_closed', @body::jsonb)
//
// A [Handler] runs an event's statements, in order, inside the transaction
// in which the consumer claimed the event in the inbox, exactly where a Go
// handler runs: duplicates and conflicts never reach it, an error rolls
// everything back. The statements take the named arguments in [Args],
// always bound as parameters. Errors of SQLSTATE classes 22 (data
// exception) and 23 (integrity constraint violation) are [consumer.Permanent]:
// the event is dead-lettered at once with Postgres's message. Any other
// error is retried with the consumer's backoff.
//
// A batch of events is applied with every statement of every event in one
// pipeline (pgx.Batch): one round trip, however many events.
package sqlconsumer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Fallback is the apply key of the statements for every subscribed event
// type that has none of its own.
const Fallback = "*"

// Handler applies events with the configured statements. It implements
// [consumer.Handler] and [consumer.BatchHandler].
type Handler struct {
	consumer string
	rules    map[string]*rule // by configured event type
	// bySubject finds the rule of a type spelled differently with the same
	// subject form ("orders/create" for "orders.create"), as consumer.Mux
	// does: the consumer receives every such spelling.
	bySubject map[string]*rule
	fallback  *rule
}

// rule is the statements of one apply key.
type rule struct {
	key   string
	stmts []statement
}

// New builds the handler of the consumer named consumerName from apply:
// event type (or [Fallback]) to its statements, run in order. Every
// statement is parsed here: an empty one, a reference to an argument not
// in [Args], or transaction control fails, naming the event type and
// statement. Whether the statements are valid SQL against the database is
// [Handler.Check]'s job.
func New(consumerName string, apply map[string][]string) (*Handler, error) {
	h := &Handler{consumer: consumerName, rules: map[string]*rule{}, bySubject: map[string]*rule{}}
	if len(apply) == 0 {
		return nil, errors.New("no statements in apply")
	}
	var errs []error
	for _, key := range sortedKeys(apply) {
		texts := apply[key]
		if len(texts) == 0 {
			errs = append(errs, fmt.Errorf("apply %q: no statement", key))
			continue
		}
		r := &rule{key: key}
		for i, text := range texts {
			st, err := parseStatement(text)
			if err != nil {
				errs = append(errs, fmt.Errorf("apply %q, statement %d: %w", key, i+1, err))
				continue
			}
			r.stmts = append(r.stmts, st)
		}
		if key == Fallback {
			h.fallback = r
			continue
		}
		if !stream.ValidTypeSpelling(key) {
			errs = append(errs, fmt.Errorf("apply %q: an event type is 1-%d bytes", key, stream.MaxEventTypeBytes))
			continue
		}
		subj := stream.TypeSubject(key)
		if other, dup := h.bySubject[subj]; dup {
			errs = append(errs, fmt.Errorf("apply %q and %q: both types map to the subject tokens %q; keep one spelling", other.key, key, subj))
			continue
		}
		h.rules[key] = r
		h.bySubject[subj] = r
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return h, nil
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Types are the event types with statements of their own, sorted (not
// [Fallback]).
func (h *Handler) Types() []string {
	out := make([]string, 0, len(h.rules))
	for t := range h.rules {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// HasFallback reports whether apply has a [Fallback] entry.
func (h *Handler) HasFallback() bool { return h.fallback != nil }

// Covers reports whether events of eventType have statements: their own,
// those of a type with the same subject form, or the fallback.
func (h *Handler) Covers(eventType string) bool { return h.rule(eventType) != nil }

func (h *Handler) rule(eventType string) *rule {
	if r, ok := h.rules[eventType]; ok {
		return r
	}
	if r, ok := h.bySubject[stream.TypeSubject(eventType)]; ok {
		return r
	}
	return h.fallback
}

// Handle implements [consumer.Handler]: ev's statements, pipelined, in
// order, in tx.
func (h *Handler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	_, err := h.run(ctx, tx, []consumer.Event{ev})
	return err
}

// HandleBatch implements [consumer.BatchHandler]: the statements of every
// event of evs in one pipeline, in stream order. A failure names the event
// whose statement failed ([consumer.FailedAt]), so the consumer re-applies
// the events around it and that event alone.
func (h *Handler) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	i, err := h.run(ctx, tx, evs)
	if err != nil {
		return consumer.FailedAt(i, err)
	}
	return nil
}

// queued is one statement in a pipeline and the event it belongs to.
type queued struct {
	ev   int
	rule *rule
	stmt int
}

// run sends the statements of evs in one pipeline and reads the results
// in order; on a failure it returns the index of the event whose statement
// failed. Statements after a failed one are not run: the transaction is
// aborted at the first error.
func (h *Handler) run(ctx context.Context, tx pgx.Tx, evs []consumer.Event) (int, error) {
	b := &pgx.Batch{}
	var order []queued
	uncovered := -1 // the first event without statements
	for i := range evs {
		ev := &evs[i]
		r := h.rule(ev.Type)
		if r == nil {
			uncovered = i // run the events before it, then fail it
			break
		}
		values := h.values(ev)
		for k, st := range r.stmts {
			args := make([]any, len(st.names))
			for a, name := range st.names {
				args[a] = values[name]
			}
			b.Queue(st.sql, args...)
			order = append(order, queued{ev: i, rule: r, stmt: k})
		}
	}
	if len(order) > 0 {
		br := tx.SendBatch(ctx, b)
		for _, q := range order {
			if _, err := br.Exec(); err != nil {
				_ = br.Close() // the error above is the one that counts
				q = culprit(order, q, err)
				return q.ev, h.classify(q.rule, q.stmt, err)
			}
		}
		if err := br.Close(); err != nil {
			return 0, fmt.Errorf("consumer %s: %w", h.consumer, err)
		}
	}
	if uncovered >= 0 {
		return uncovered, consumer.Permanent(fmt.Errorf("consumer %s: no statement for event type %q in sql.apply (add one, or a %q entry)",
			h.consumer, evs[uncovered].Type, Fallback))
	}
	return 0, nil
}

// culprit is the statement that caused err, reported on the result of at.
// A statement that cannot be prepared (or its arguments encoded) fails the
// pipeline before any statement runs, and pgx then returns that error for
// every result, the first one included: the statement it names is the
// first queued one with its SQL.
func culprit(order []queued, at queued, err error) queued {
	var pre pgx.ErrPreprocessingBatch
	if !errors.As(err, &pre) {
		return at
	}
	for _, q := range order {
		if q.rule.stmts[q.stmt].sql == pre.SQL() {
			return q
		}
	}
	return at
}

// values are the named arguments of ev, in text form.
func (h *Handler) values(ev *consumer.Event) map[string]any {
	var received any // NULL when the message carried no time
	if !ev.ReceivedAt.IsZero() {
		received = ev.ReceivedAt.UTC().Format(receivedAtLayout)
	}
	return map[string]any{
		ArgBody:       string(ev.Body),
		ArgEventID:    ev.ID,
		ArgEventType:  ev.Type,
		ArgSource:     ev.Source,
		ArgConsumer:   h.consumer,
		ArgStreamSeq:  strconv.FormatUint(ev.StreamSeq, 10),
		ArgReceivedAt: received,
	}
}

// receivedAtLayout is RFC 3339 with microseconds, Postgres's resolution.
const receivedAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// classify wraps a statement's error with where it came from and marks
// data and constraint errors permanent: the same event would fail the
// same way on every delivery.
func (h *Handler) classify(r *rule, stmt int, err error) error {
	err = fmt.Errorf("consumer %s, event type %s, statement %d: %w", h.consumer, r.key, stmt+1, err)
	if Permanent(err) {
		return consumer.Permanent(err)
	}
	return err
}

// Permanent reports whether err holds a Postgres error of SQLSTATE class
// 22 (data exception: a bad cast, a value out of range, invalid JSON or
// UTF-8) or 23 (integrity constraint violation: NOT NULL, CHECK, UNIQUE,
// FOREIGN KEY), which redelivering the event cannot fix.
func Permanent(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23")
}

// Check prepares every statement in tx, each under a savepoint of its own
// so that one failure does not hide the others, and returns every error,
// naming the consumer, the event type and Postgres's message: a syntax
// error, an unknown table, column or function, or a type that does not
// fit. Run it after the migrations, in a transaction the caller rolls
// back; it executes nothing.
func (h *Handler) Check(ctx context.Context, tx pgx.Tx) error {
	var errs []error
	check := func(r *rule) {
		for k, st := range r.stmts {
			sp, err := tx.Begin(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("consumer %s: check: %w", h.consumer, err))
				return
			}
			sd, err := sp.Conn().PgConn().Prepare(ctx, "", st.sql, nil)
			if err == nil && len(sd.ParamOIDs) != len(st.names) {
				// A $n of the statement's own beyond the named ones: it
				// would be bound to nothing. (One within them would take a
				// named argument's value; the documentation says to use names.)
				err = fmt.Errorf("the statement has %d parameters, %d of them named: use the named arguments (@body, …), not $n",
					len(sd.ParamOIDs), len(st.names))
			}
			if rerr := sp.Rollback(ctx); rerr != nil && err == nil {
				err = rerr
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("consumer %s, event type %s, statement %d: %w", h.consumer, r.key, k+1, err))
			}
		}
	}
	for _, t := range h.Types() {
		check(h.rules[t])
	}
	if h.fallback != nil {
		check(h.fallback)
	}
	return errors.Join(errs...)
}
