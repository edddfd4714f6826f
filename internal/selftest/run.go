package selftest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// Target is the deployment a run checks: how to deliver a signed webhook
// to its self-test source, and its Postgres and JetStream.
type Target struct {
	// Post delivers body, signed, as event eventID of the self-test
	// source and returns the HTTP status.
	Post func(ctx context.Context, eventID string, body []byte) (int, error)
	Pool *pgxpool.Pool
	JS   jetstream.JetStream
}

// RunOptions configure a run.
type RunOptions struct {
	// RunID names the run's rows; empty: a new one (NewRunID).
	RunID string
	// Timeout bounds the wait of each check for the deployment to settle
	// (0: 20s).
	Timeout time.Duration
}

// NewRunID is a fresh run id: the time and random bits, usable as a
// subject token.
func NewRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "st" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}

// Counters are what a check shows, counted for the run only: rows in
// hookbridge.inbox, effects in hookbridge_selftest.effects, outbox rows
// pending and sent, messages relayed to EVENTS, conflicts and dead
// letters.
type Counters struct {
	Inbox       int `json:"inbox"`
	Effects     int `json:"effects"`
	Pending     int `json:"outbox_pending"`
	Sent        int `json:"outbox_sent"`
	Relayed     int `json:"relayed"`
	Conflicts   int `json:"conflicts"`
	DeadLetters int `json:"dead_letters"`
}

func (c Counters) String() string {
	return fmt.Sprintf("inbox=%d effects=%d pending=%d sent=%d relayed=%d conflicts=%d dead=%d",
		c.Inbox, c.Effects, c.Pending, c.Sent, c.Relayed, c.Conflicts, c.DeadLetters)
}

// Check is the result of one check.
type Check struct {
	N        int      `json:"n"`
	Name     string   `json:"name"`
	OK       bool     `json:"ok"`
	Answers  []string `json:"answers,omitempty"` // what the deployment answered (HTTP statuses, the PubAck)
	Counters Counters `json:"counters"`
	Problems []string `json:"problems,omitempty"`
}

// Report is a whole run.
type Report struct {
	RunID  string  `json:"run_id"`
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
	// Resolved counts the rows the run made on purpose and resolved at its
	// end (see [Run]).
	Resolved Resolved `json:"resolved"`
}

// Resolved counts the dead letters and conflicts a run resolved.
type Resolved struct {
	DeadLetters int64 `json:"dead_letters"`
	Conflicts   int64 `json:"conflicts"`
}

// Failed counts the checks that did not hold.
func (r Report) Failed() int {
	n := 0
	for _, c := range r.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

// Check names, in the order they run.
const (
	CheckFirst     = "first-delivery"
	CheckRepeat    = "exact-repeat"
	CheckConflict  = "same-id-other-body"
	CheckFailure   = "failure-before-commit"
	CheckParallel  = "parallel-deliveries"
	CheckBetween   = "error-between-writes"
	CheckRelayed   = "outbox-relayed"
	CheckDuplicate = "duplicate-publish"
)

// ErrNotEnabled is returned when the deployment runs no self-test
// consumer.
var ErrNotEnabled = errors.New("the deployment runs no self-test consumer: set selftest: {enabled: true, secrets: [...]} in the configuration serve uses")

// run is one run in progress.
type run struct {
	t       Target
	id      string
	timeout time.Duration
	report  Report
}

// Run runs the eight checks of the acceptance protocol, in order, against
// t, and reports each with its counters. The rows it makes are kept under
// the run id (see [Cleanup]). The dead letter and the conflict the
// protocol makes on purpose (checks 6 and 3) are resolved at the end, so
// that they do not count among the operator's unresolved ones in status,
// the console, the metrics and the alerts; any other dead letter or
// conflict of the run is left unresolved for the operator to see. An
// error means the run could not be made at all (Postgres or JetStream
// unreachable, the self-test not enabled); a check that does not hold is
// in the report.
func Run(ctx context.Context, t Target, o RunOptions) (Report, error) {
	r := &run{t: t, id: o.RunID, timeout: o.Timeout}
	if r.id == "" {
		r.id = NewRunID()
	}
	if !stream.ValidName(r.id) {
		return Report{}, fmt.Errorf("selftest: run id %q must be letters, digits, '-' or '_'", r.id)
	}
	if r.timeout <= 0 {
		r.timeout = 20 * time.Second
	}
	r.report.RunID = r.id
	if _, err := t.JS.Consumer(ctx, stream.Hooks, Consumer); err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return r.report, ErrNotEnabled
		}
		return r.report, fmt.Errorf("selftest: look up consumer %s: %w", Consumer, err)
	}
	if _, err := r.counters(ctx); err != nil {
		return r.report, err
	}
	steps := []func(context.Context, *Check) error{
		r.first, r.repeat, r.conflict, r.failure, r.parallel, r.between, r.relayed, r.duplicate,
	}
	names := []string{CheckFirst, CheckRepeat, CheckConflict, CheckFailure, CheckParallel, CheckBetween, CheckRelayed, CheckDuplicate}
	for i, step := range steps {
		c := Check{N: i + 1, Name: names[i]}
		if err := step(ctx, &c); err != nil {
			c.Problems = append(c.Problems, err.Error())
		}
		c.OK = len(c.Problems) == 0
		r.report.Checks = append(r.report.Checks, c)
	}
	r.report.OK = r.report.Failed() == 0
	if err := r.resolveExpected(ctx); err != nil {
		return r.report, err
	}
	return r.report, ctx.Err()
}

// resolveExpected resolves the dead letter of check 6's event and the
// conflict of check 3's (its id came back with another body).
func (r *run) resolveExpected(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx) // an interrupted run still resolves what it made
	note := fmt.Sprintf("made on purpose by check %s of self-test run %s", CheckBetween, r.id)
	n, err := store.DeadLetterResolveForEvent(ctx, r.t.Pool, Consumer, Source, r.eventID(6), ResolutionSelftest, note)
	if err != nil {
		return fmt.Errorf("selftest: resolve the dead letter of %s: %w", r.eventID(6), err)
	}
	r.report.Resolved.DeadLetters = n
	resolution := fmt.Sprintf("%s: made on purpose by check %s of run %s", ResolutionSelftest, CheckConflict, r.id)
	if n, err = store.ConflictResolveForEvent(ctx, r.t.Pool, Source, r.eventID(1), resolution); err != nil {
		return fmt.Errorf("selftest: resolve the conflict of %s: %w", r.eventID(1), err)
	}
	r.report.Resolved.Conflicts = n
	return nil
}

// ResolutionSelftest is the resolution of the rows a run made on purpose.
const ResolutionSelftest = "selftest"

func (r *run) eventID(n int) string { return fmt.Sprintf("%s-%d", r.id, n) }

func (r *run) body(check string, mod func(*Probe)) []byte {
	p := Probe{Type: EventType, Run: r.id, Check: check}
	if mod != nil {
		mod(&p)
	}
	b, _ := json.Marshal(p) // a struct of strings and bools always encodes
	return b
}

// post delivers one event and records the answer. It reports whether
// the ingress took the delivery at all (2xx or 409): after a refusal (a
// wrong secret, say) there is nothing to wait for.
//
// want lists the answers that hold: the first is the ingress's inside the
// JetStream duplicate window; a repeat after the window is accepted (202)
// and caught by the consumer's inbox instead, which the counters prove.
func (r *run) post(ctx context.Context, c *Check, n int, body []byte, want ...int) bool {
	status, err := r.t.Post(ctx, r.eventID(n), body)
	if err != nil {
		c.Problems = append(c.Problems, fmt.Sprintf("deliver %s: %v", r.eventID(n), err))
		return false
	}
	c.Answers = append(c.Answers, fmt.Sprint(status))
	if !slices.Contains(want, status) {
		c.Problems = append(c.Problems, fmt.Sprintf("deliver %s answered %d, want %d", r.eventID(n), status, want[0]))
	}
	return status/100 == 2 || status == 409
}

// counters reads the run's counters.
func (r *run) counters(ctx context.Context) (Counters, error) {
	var c Counters
	var err error
	prefix := r.id + "-"
	if c.Inbox, err = store.InboxCountPrefix(ctx, r.t.Pool, Consumer, Source, prefix); err != nil {
		return c, fmt.Errorf("selftest: count inbox: %w", err)
	}
	if err = r.t.Pool.QueryRow(ctx, `SELECT count(*) FROM hookbridge_selftest.effects WHERE run_id = $1`, r.id).Scan(&c.Effects); err != nil {
		return c, fmt.Errorf("selftest: count effects (is the hookbridge_selftest schema migrated?): %w", err)
	}
	rows, err := store.OutboxList(ctx, r.t.Pool, OutboxID(prefix))
	if err != nil {
		return c, fmt.Errorf("selftest: read outbox: %w", err)
	}
	for _, o := range rows {
		switch o.Status {
		case "pending":
			c.Pending++
		case "sent":
			c.Sent++
		}
	}
	if c.Conflicts, err = store.ConflictCountPrefix(ctx, r.t.Pool, Source, prefix); err != nil {
		return c, fmt.Errorf("selftest: count conflicts: %w", err)
	}
	if c.DeadLetters, err = store.DeadLetterCountPrefix(ctx, r.t.Pool, Consumer, prefix); err != nil {
		return c, fmt.Errorf("selftest: count dead letters: %w", err)
	}
	if c.Relayed, err = r.relayedCount(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// relayedCount counts the run's messages in EVENTS.
func (r *run) relayedCount(ctx context.Context) (int, error) {
	s, err := r.t.JS.Stream(ctx, stream.Events)
	if err != nil {
		return 0, fmt.Errorf("selftest: stream %s: %w", stream.Events, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(SubjectRoot+"."+r.id+".>"))
	if err != nil {
		return 0, fmt.Errorf("selftest: stream %s: %w", stream.Events, err)
	}
	n := 0
	for _, m := range info.State.Subjects {
		n += int(m)
	}
	return n, nil
}

// settled reports whether the self-test consumer has applied (or given
// up on) every message it was delivered: nothing pending, nothing
// waiting for an ack or a redelivery.
func (r *run) settled(ctx context.Context) (bool, error) {
	cons, err := r.t.JS.Consumer(ctx, stream.Hooks, Consumer)
	if err != nil {
		return false, fmt.Errorf("selftest: consumer %s: %w", Consumer, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("selftest: consumer %s: %w", Consumer, err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0, nil
}

// await polls until the consumer has settled and cond holds for the
// counters, or the check's time-out passes; it returns the last counters
// and whether cond held.
func (r *run) await(ctx context.Context, c *Check, what string, cond func(Counters) bool) bool {
	deadline := time.Now().Add(r.timeout)
	for {
		cur, err := r.counters(ctx)
		if err != nil {
			c.Problems = append(c.Problems, err.Error())
			return false
		}
		c.Counters = cur
		ok, err := r.settled(ctx)
		if err != nil {
			c.Problems = append(c.Problems, err.Error())
			return false
		}
		if ok && cond(cur) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			state := "settled"
			if !ok {
				state = "still pending or redelivering"
			}
			c.Problems = append(c.Problems, fmt.Sprintf("after %s: want %s; have %s (consumer %s)", r.timeout, what, cur, state))
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// effectsOf is how many effects event n has, the highest delivery that
// made one, and whether all of them are of body.
func (r *run) effectsOf(ctx context.Context, n int, body []byte) (count, delivery int, sameBody bool, err error) {
	sum := sha256.Sum256(body)
	err = r.t.Pool.QueryRow(ctx, `SELECT count(*), COALESCE(max(delivery), 0), COALESCE(bool_and(body_sha256 = $3), true)
		FROM hookbridge_selftest.effects WHERE run_id = $1 AND event_id = $2`, r.id, r.eventID(n), sum[:]).Scan(&count, &delivery, &sameBody)
	if err != nil {
		err = fmt.Errorf("selftest: read effects of %s: %w", r.eventID(n), err)
	}
	return count, delivery, sameBody, err
}

// requireEffects adds a problem unless event n has exactly want effects,
// all of body.
func (r *run) requireEffects(ctx context.Context, c *Check, n, want int, body []byte) (delivery int) {
	count, delivery, same, err := r.effectsOf(ctx, n, body)
	switch {
	case err != nil:
		c.Problems = append(c.Problems, err.Error())
	case count != want:
		c.Problems = append(c.Problems, fmt.Sprintf("effects of %s = %d, want %d", r.eventID(n), count, want))
	case !same:
		c.Problems = append(c.Problems, fmt.Sprintf("an effect of %s is of another body: overwritten", r.eventID(n)))
	}
	return delivery
}

func (r *run) base(ctx context.Context, c *Check) (Counters, bool) {
	b, err := r.counters(ctx)
	if err != nil {
		c.Problems = append(c.Problems, err.Error())
		return b, false
	}
	return b, true
}

func outbox(c Counters) int { return c.Pending + c.Sent }

// 1. A new event: one inbox row, one effect, one outbox row.
func (r *run) first(ctx context.Context, c *Check) error {
	b, ok := r.base(ctx, c)
	if !ok {
		return nil
	}
	if !r.post(ctx, c, 1, r.body("first", nil), 202) {
		return nil
	}
	r.await(ctx, c, "one more inbox row, effect and outbox row", func(n Counters) bool {
		return n.Inbox == b.Inbox+1 && n.Effects == b.Effects+1 && outbox(n) == outbox(b)+1
	})
	r.requireEffects(ctx, c, 1, 1, r.body("first", nil))
	return nil
}

// unchanged is the condition that nothing was applied since b.
func unchanged(b Counters) func(Counters) bool {
	return func(n Counters) bool {
		return n.Inbox == b.Inbox && n.Effects == b.Effects && outbox(n) == outbox(b)
	}
}

// 2. The same bytes again: answered as a duplicate, nothing changes.
func (r *run) repeat(ctx context.Context, c *Check) error {
	b, ok := r.base(ctx, c)
	if !ok {
		return nil
	}
	if !r.post(ctx, c, 1, r.body("first", nil), 200, 202) {
		return nil
	}
	if r.await(ctx, c, "no new inbox row, effect or outbox row", func(Counters) bool { return true }) && !unchanged(b)(c.Counters) {
		c.Problems = append(c.Problems, fmt.Sprintf("counters moved from %s to %s", b, c.Counters))
	}
	r.requireEffects(ctx, c, 1, 1, r.body("first", nil))
	return nil
}

// 3. The same id with another body: a recorded conflict, not applied,
// the first effect not overwritten.
func (r *run) conflict(ctx context.Context, c *Check) error {
	b, ok := r.base(ctx, c)
	if !ok {
		return nil
	}
	if !r.post(ctx, c, 1, r.body("first", func(p *Probe) { p.Payload = "another body" }), 409, 202) {
		return nil
	}
	if r.await(ctx, c, "one more conflict", func(n Counters) bool { return n.Conflicts == b.Conflicts+1 }) && !unchanged(b)(c.Counters) {
		c.Problems = append(c.Problems, fmt.Sprintf("counters moved from %s to %s: the conflict was applied", b, c.Counters))
	}
	r.requireEffects(ctx, c, 1, 1, r.body("first", nil))
	return nil
}

// 4. A failure injected before commit on the first delivery: rolled back,
// and the redelivery applies once.
func (r *run) failure(ctx context.Context, c *Check) error {
	b, ok := r.base(ctx, c)
	if !ok {
		return nil
	}
	body := r.body("failure", func(p *Probe) { p.FailBeforeCommit = true })
	if !r.post(ctx, c, 4, body, 202) {
		return nil
	}
	r.await(ctx, c, "one more inbox row, effect and outbox row after the redelivery", func(n Counters) bool {
		return n.Inbox == b.Inbox+1 && n.Effects == b.Effects+1 && outbox(n) == outbox(b)+1
	})
	if d := r.requireEffects(ctx, c, 4, 1, body); d < 2 && len(c.Problems) == 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("the effect was made by delivery %d: the injected failure did not happen", d))
	} else if d > 0 {
		c.Answers = append(c.Answers, fmt.Sprintf("applied at delivery %d", d))
	}
	return nil
}

// 5. Two deliveries at once: one accepted, one a duplicate, one effect.
func (r *run) parallel(ctx context.Context, c *Check) error {
	b, ok := r.base(ctx, c)
	if !ok {
		return nil
	}
	body := r.body("parallel", nil)
	statuses := make([]int, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-start
			statuses[i], errs[i] = r.t.Post(ctx, r.eventID(5), body)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Problems = append(c.Problems, fmt.Sprintf("deliver %s: %v", r.eventID(5), err))
	}
	slices.Sort(statuses)
	c.Answers = []string{fmt.Sprint(statuses[0]), fmt.Sprint(statuses[1])}
	if statuses[0] != 200 || statuses[1] != 202 {
		c.Problems = append(c.Problems, fmt.Sprintf("answers %v, want one 202 and one 200", statuses))
	}
	r.await(ctx, c, "one more inbox row, effect and outbox row", func(n Counters) bool {
		return n.Inbox == b.Inbox+1 && n.Effects == b.Effects+1 && outbox(n) == outbox(b)+1
	})
	r.requireEffects(ctx, c, 5, 1, body)
	return nil
}

// 6. An error between the business write and the outbox write: neither
// kept, the event dead-lettered (not hidden).
func (r *run) between(ctx context.Context, c *Check) error {
	b, ok := r.base(ctx, c)
	if !ok {
		return nil
	}
	body := r.body("between", func(p *Probe) { p.FailBetweenWrites = true })
	if !r.post(ctx, c, 6, body, 202) {
		return nil
	}
	if r.await(ctx, c, "one more dead letter", func(n Counters) bool { return n.DeadLetters == b.DeadLetters+1 }) && !unchanged(b)(c.Counters) {
		c.Problems = append(c.Problems, fmt.Sprintf("counters moved from %s to %s: a write of the failed apply was kept", b, c.Counters))
	}
	r.requireEffects(ctx, c, 6, 0, body)
	return nil
}

// 7. Every outbox row relayed to EVENTS, the first with its stable id.
func (r *run) relayed(ctx context.Context, c *Check) error {
	if !r.await(ctx, c, "every outbox row sent and relayed once", func(n Counters) bool {
		return n.Pending == 0 && n.Sent > 0 && n.Relayed == n.Sent
	}) {
		return nil
	}
	s, err := r.t.JS.Stream(ctx, stream.Events)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream.Events, err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, Subject(r.id, "first"))
	if err != nil {
		return fmt.Errorf("read the relayed event of %s: %w", r.eventID(1), err)
	}
	id := msg.Header.Get(jetstream.MsgIDHeader)
	c.Answers = append(c.Answers, "Nats-Msg-Id "+id)
	if id != OutboxID(r.eventID(1)) {
		return fmt.Errorf("relayed with Nats-Msg-Id %q, want the stable %q", id, OutboxID(r.eventID(1)))
	}
	if !bytes.Equal(msg.Data, r.body("first", nil)) {
		return fmt.Errorf("relayed payload %q is not the enqueued one", msg.Data)
	}
	return nil
}

// 8. A second publish of the first event's id: JetStream reports a
// duplicate, and EVENTS still holds one copy.
func (r *run) duplicate(ctx context.Context, c *Check) error {
	b, ok := r.base(ctx, c)
	if !ok {
		return nil
	}
	m := nats.NewMsg(Subject(r.id, "first"))
	m.Data = r.body("first", nil)
	ack, err := r.t.JS.PublishMsg(ctx, m, jetstream.WithMsgID(OutboxID(r.eventID(1))))
	if err != nil {
		return fmt.Errorf("publish again: %w", err)
	}
	c.Answers = append(c.Answers, fmt.Sprintf("duplicate=%t", ack.Duplicate))
	if !ack.Duplicate {
		c.Problems = append(c.Problems, "JetStream stored the second publish: not de-duplicated")
	}
	r.await(ctx, c, "no new message in EVENTS", func(n Counters) bool { return n.Relayed == b.Relayed })
	return nil
}

// Purged is what [Cleanup] removed.
type Purged struct {
	Inbox       int64  `json:"inbox"`
	Conflicts   int64  `json:"conflicts"`
	Failures    int64  `json:"delivery_failures"`
	DeadLetters int64  `json:"dead_letters"`
	Outbox      int64  `json:"outbox"`
	Effects     int64  `json:"effects"`
	Events      uint64 `json:"events_messages"`
}

func (p Purged) String() string {
	return fmt.Sprintf("inbox=%d conflicts=%d failures=%d dead=%d outbox=%d effects=%d events=%d",
		p.Inbox, p.Conflicts, p.Failures, p.DeadLetters, p.Outbox, p.Effects, p.Events)
}

// Cleanup removes a run's rows (inbox, conflicts, failure counters, dead
// letters and outbox rows of the self-test, its effects) and its messages
// in EVENTS. The HOOKS messages are left to the stream's limits and the
// storage guard, like every applied message.
func Cleanup(ctx context.Context, t Target, runID string) (Purged, error) {
	var p Purged
	if !stream.ValidName(runID) {
		return p, fmt.Errorf("selftest: run id %q must be letters, digits, '-' or '_'", runID)
	}
	prefix := runID + "-"
	rows, err := store.PrefixPurge(ctx, t.Pool, Consumer, Source, prefix, OutboxID(prefix))
	if err != nil {
		return p, fmt.Errorf("selftest: remove run %s: %w", runID, err)
	}
	p.Inbox, p.Conflicts, p.Failures, p.DeadLetters, p.Outbox = rows.Inbox, rows.Conflicts, rows.Failures, rows.DeadLetters, rows.Outbox
	tag, err := t.Pool.Exec(ctx, `DELETE FROM hookbridge_selftest.effects WHERE run_id = $1`, runID)
	if err != nil {
		return p, fmt.Errorf("selftest: remove effects of run %s: %w", runID, err)
	}
	p.Effects = tag.RowsAffected()
	s, err := t.JS.Stream(ctx, stream.Events)
	if err != nil {
		return p, fmt.Errorf("selftest: stream %s: %w", stream.Events, err)
	}
	subj := SubjectRoot + "." + runID + ".>"
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return p, fmt.Errorf("selftest: stream %s: %w", stream.Events, err)
	}
	for _, n := range info.State.Subjects {
		p.Events += n
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return p, fmt.Errorf("selftest: purge %s: %w", subj, err)
	}
	return p, nil
}

// WriteText prints the report as the protocol's seeds print theirs: one
// line per check with its verdict, answers and counters, then each
// problem, then the summary.
func (r Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "selftest run %s\n", r.RunID)
	for _, c := range r.Checks {
		verdict := "ok"
		if !c.OK {
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "%d %-22s %-4s %s  %s\n", c.N, c.Name, verdict, c.Counters, strings.Join(c.Answers, ", "))
		for _, p := range c.Problems {
			fmt.Fprintf(&b, "    %s\n", p)
		}
	}
	if n := r.Resolved; n.DeadLetters+n.Conflicts > 0 {
		fmt.Fprintf(&b, "resolved what the run made on purpose: %d dead letter(s), %d conflict(s)\n", n.DeadLetters, n.Conflicts)
	}
	if r.OK {
		fmt.Fprintf(&b, "all %d checks hold (run %s)\n", len(r.Checks), r.RunID)
	} else {
		fmt.Fprintf(&b, "%d of %d checks failed (run %s)\n", r.Failed(), len(r.Checks), r.RunID)
	}
	_, err := w.Write(b.Bytes())
	return err
}
