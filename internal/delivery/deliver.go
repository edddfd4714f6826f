package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// outcome is what became of one turn of a delivery.
type outcome int

const (
	// settled: delivered, dead-lettered or handed to Postgres; nothing
	// is held for it here any more.
	settled outcome = iota
	// notStarted: the sender is stopping, its lease or its pin is gone,
	// or the endpoint was disabled; nothing was sent.
	notStarted
	// later: it could not be prepared (a failure before the send: its
	// body or its state could not be read); nothing was sent, it is
	// tried again after the returned wait.
	later
	// waitKey: a requeue of its key goes first (ordered endpoints).
	waitKey
)

// runLive delivers one live message of an unordered endpoint.
func (s *Sender) runLive(ctx context.Context, it *item) {
	out, d := s.deliver(ctx, it)
	for out == later && it.failed != nil && sleep(ctx, d) {
		out, d = s.deliver(ctx, it) // only the record of an answer is missing
	}
	switch out {
	case notStarted:
		s.nak(it, 0) // back at once, to whoever reads the endpoint next
	case later:
		s.nak(it, d)
	}
}

// deliver makes one attempt of it, when it may, and settles the outcome.
func (s *Sender) deliver(ctx context.Context, it *item) (outcome, time.Duration) {
	if f := it.failed; f != nil {
		// An answer is in; only its record is missing.
		if f.dead {
			return s.deadLetter(ctx, it, *f)
		}
		return s.recordFailure(ctx, it, *f)
	}
	pool, name := s.m.opts.Pool, s.e.Name
	if it.msg != nil && it.nd > 1 {
		// Delivered before: Postgres may track it already (a failed
		// attempt was written, and the ack was lost with a process).
		p, ok, err := store.DeliveryPendingGet(ctx, pool, name, it.seq)
		if err != nil {
			s.log.Warn("delivery: read a redelivered event's state; it waits", "seq", it.seq, "err", err)
			return later, s.m.t.prepare
		}
		if ok {
			s.ack(it)
			if s.e.Ordered {
				s.markPG(p.OrderingKey)
			}
			return settled, 0
		}
		// Or its schedule ended in a dead letter whose Term was lost (the
		// dead letter is committed first, so a crash between the two
		// redelivers the message rather than losing the dead letter):
		// terminated again, not sent.
		dead, err := store.DeliveryDeadLetterExists(ctx, pool, name, it.seq, it.eventID)
		if err != nil {
			s.log.Warn("delivery: read a redelivered event's state; it waits", "seq", it.seq, "err", err)
			return later, s.m.t.prepare
		}
		if dead {
			if m := s.release(it); m != nil {
				if err := m.TermWithReason("delivery schedule spent"); err != nil {
					s.log.Warn("delivery: term", "err", err)
				}
			}
			return settled, 0
		}
	}
	pl, err := s.payloadOf(ctx, it)
	if errors.Is(err, errGone) {
		s.log.Warn("delivery: the event left EVENTS before it was delivered; dead-lettered", "seq", it.seq, "event_id", it.eventID)
		return s.deadLetter(ctx, it, failure{n: it.attempts, res: result{class: classExpired}, dead: true})
	}
	if err == nil && s.m.hooks.beforeSend != nil {
		err = s.m.hooks.beforeSend(it.eventID)
	}
	if err != nil {
		s.log.Warn("delivery: prepare a delivery; it waits", "seq", it.seq, "err", err, "retry_in", s.m.t.prepare)
		return later, s.m.t.prepare
	}
	n := it.attempts + 1
	res, ok, out, d := s.attempt(ctx, it, pl, n)
	if !ok {
		return out, d
	}
	s.noteResult(res)
	switch {
	case res.success():
		s.succeeded(ctx, it)
		return settled, 0
	case n >= len(s.e.Retry):
		return s.deadLetter(ctx, it, failure{n: n, res: res, dead: true, pl: pl})
	default:
		return s.recordFailure(ctx, it, failure{n: n, delay: nextDelay(&s.e, n, res), res: res})
	}
}

// payloadOf is what it sends: a live message's own body and headers, a
// requeued dead letter's copy, or the event read again from EVENTS.
func (s *Sender) payloadOf(ctx context.Context, it *item) (payload, error) {
	if it.msg != nil {
		s.mu.Lock()
		m := it.msg
		s.mu.Unlock()
		return payload{id: it.eventID, body: m.Data(), header: m.Headers()}, nil
	}
	if id := it.row.DeadLetterID; id != 0 {
		body, hdr, ok, err := store.DeliveryDeadLetterBody(ctx, s.m.opts.Pool, id)
		if err != nil {
			return payload{}, fmt.Errorf("dead letter %d: %w", id, err)
		}
		if ok && body != nil {
			return payload{id: it.eventID, body: body, header: natsHeader(hdr)}, nil
		}
	}
	st, err := s.m.events(ctx)
	if err != nil {
		return payload{}, err
	}
	raw, err := st.GetMsg(ctx, it.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return payload{}, errGone
	}
	if err != nil {
		return payload{}, fmt.Errorf("read %s sequence %d: %w", stream.Events, it.seq, err)
	}
	if id := raw.Header.Get(nats.MsgIdHdr); id != "" && id != it.eventID {
		return payload{}, errGone // the stream was made anew: another event has the sequence
	}
	return payload{id: it.eventID, body: raw.Data, header: raw.Header}, nil
}

// attempt posts pl once as attempt n and records it. ok is false when no
// request was sent, and out and d say what becomes of it: notStarted
// (the sender is stopping, the lease or the pin is gone, the endpoint was
// disabled, or a test dropped the answer), later (its key's dead letters
// could not be marked passed) or waitKey (a requeue of its key goes
// first).
func (s *Sender) attempt(ctx context.Context, it *item, pl payload, n int) (res result, ok bool, out outcome, d time.Duration) {
	if s.limiter != nil {
		if err := s.limiter.Wait(ctx); err != nil {
			return result{}, false, notStarted, 0
		}
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return result{}, false, notStarted, 0
	}
	defer func() { <-s.slots }()
	if h := s.m.hooks.mayStart; h != nil && !h(it.eventID) {
		return result{}, false, notStarted, 0
	}
	s.mu.Lock()
	ok = s.mayStartLocked(ctx, it)
	s.mu.Unlock()
	if !ok {
		return result{}, false, notStarted, 0
	}
	// Only now, the attempt about to start, are the key's earlier dead
	// letters passed (still before the send: a requeue racing it either
	// lands first, and the event waits behind it, or is refused).
	if out, d := s.passDeadLetters(ctx, it); out != settled {
		return result{}, false, out, d
	}
	s.mu.Lock()
	ok = s.mayStartLocked(ctx, it)
	m := it.msg
	// The attempt really starts: its whole timeout must lie within the
	// message's ack wait (the timeout plus ackMargin). A message that
	// arrived, or was kept in progress, within half the margin has that
	// already; one that waited longer for a slot, the rate limiter or its
	// key gets an in-progress (not one per delivery: at thousands a
	// second each is a message for the server).
	fresh := time.Since(it.touched) < ackMargin/2
	if ok {
		it.inflight = true
		if !fresh {
			it.touched = time.Now()
		}
	}
	s.mu.Unlock()
	if !ok {
		return result{}, false, notStarted, 0
	}
	if m != nil && !fresh {
		_ = m.InProgress()
	}
	// An attempt that started ends by its timeout, not by a stop: the
	// answer is recorded and the delivery settled.
	actx := s.m.tracer.TraceAttemptStart(s.m.hard, TraceAttemptStartData{Endpoint: s.e.Name, EventID: pl.id,
		Subject: it.subject, StreamSeq: it.seq, Attempt: n, Header: pl.header})
	res = post(actx, &s.e, s.client, s.m.opts.Sign, pl)
	s.m.tracer.TraceAttemptEnd(actx, TraceAttemptEndData{Endpoint: s.e.Name, EventID: pl.id, Attempt: n,
		Status: res.status, Class: StatusClass(res.status, res.class), Success: res.success(), Duration: res.duration})
	if res.class == classCanceled {
		return res, false, notStarted, 0 // the process is being killed
	}
	if h := s.m.hooks.afterSend; h != nil && h(pl.id, res.status) {
		return res, false, notStarted, 0
	}
	s.m.rec.add(store.DeliveryAttempt{
		Endpoint: s.e.Name, EventID: pl.id, Subject: it.subject, StreamSeq: it.seq, Attempt: n,
		StatusCode: res.status, ErrorClass: res.class, Excerpt: res.excerpt, Duration: res.duration,
	})
	return res, true, settled, 0
}

// passDeadLetters marks the dead letters of it's key before it passed,
// on an ordered endpoint whose key has an unpassed one, as it is about
// to be sent. settled: go on and send it; later: the mark could not be
// written; waitKey: a requeue of the key goes first.
func (s *Sender) passDeadLetters(ctx context.Context, it *item) (outcome, time.Duration) {
	if !s.e.Ordered || !s.deadKey(it.key) {
		return settled, 0
	}
	pending, more, err := store.DeliveryDeadLetterPass(ctx, s.m.opts.Pool, s.e.Name, it.key, it.seq)
	if err != nil {
		s.log.Warn("delivery: mark a dead letter passed; the event waits", "seq", it.seq, "err", err)
		return later, s.m.t.prepare
	}
	if pending {
		s.markPG(it.key)
		return waitKey, 0
	}
	if !more {
		// Kept while the key has a dead letter at or after this event
		// (a replay sends an earlier event again): the next later event
		// must pass it.
		s.mu.Lock()
		delete(s.deadKeys, it.key)
		s.mu.Unlock()
	}
	return settled, 0
}

// succeeded settles a delivered event: a live one is acked, a row in
// Postgres goes (and the next of its key becomes due).
func (s *Sender) succeeded(ctx context.Context, it *item) {
	if it.row == nil {
		s.ack(it)
		return
	}
	dctx, cancel := context.WithTimeout(s.m.hard, 10*time.Second)
	defer cancel()
	err := pgx.BeginFunc(dctx, s.m.opts.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		store.QueueDeliveryPendingDone(b, s.e.Name, it.seq, it.key)
		if id := it.row.DeadLetterID; id != 0 {
			store.QueueDeliveryDeadLetterRedelivered(b, id)
		}
		return tx.SendBatch(dctx, b).Close()
	})
	if err != nil {
		// The row stays and is sent again (same webhook-id; the receiver
		// dedups): a resend rather than a lost delivery.
		s.log.Warn("delivery: record a delivered event; it will be sent again", "seq", it.seq, "err", err)
	}
}

// recordFailure writes a failed attempt to Postgres (attempt count, next
// attempt) as the endpoint's owner and lets JetStream go of a live
// message. When the database cannot be reached, an unordered live message
// is naked with its delay instead (its count is lost with it); anything
// else keeps the failure and writes it later, without another attempt.
func (s *Sender) recordFailure(ctx context.Context, it *item, f failure) (outcome, time.Duration) {
	it.failed = &f
	p := store.DeliveryPending{Endpoint: s.e.Name, StreamSeq: it.seq, EventID: it.eventID, Subject: it.subject,
		OrderingKey: it.key, Attempts: f.n}
	wctx, cancel := context.WithTimeout(s.m.hard, 10*time.Second)
	defer cancel()
	written, err := store.DeliveryPendingFail(wctx, s.m.opts.Pool, s.m.id, p, f.delay)
	switch {
	case err != nil:
		if it.msg != nil && !s.e.Ordered {
			s.log.Warn("delivery: record a failed attempt; handed back to JetStream with its delay", "seq", it.seq, "err", err)
			s.nak(it, min(f.delay, 30*time.Second))
			return settled, 0
		}
		s.log.Warn("delivery: record a failed attempt; retrying", "seq", it.seq, "err", err)
		return later, s.m.t.prepare
	case !written:
		// The lease ran out: the next owner decides. A live message goes
		// back to JetStream; a row stays as it was.
		it.failed = nil
		return notStarted, 0
	}
	it.failed = nil
	it.attempts = f.n
	if it.msg != nil {
		s.ack(it)
	}
	if s.e.Ordered {
		s.markPG(it.key)
	}
	poke(s.wakePG)
	return settled, 0
}

// deadLetter records it in the endpoint's error queue, with what a
// requeue sends, and ends its delivery: the row in Postgres goes in the
// same transaction (the next of its key becomes due), a live message is
// terminated. Written as the endpoint's owner only.
func (s *Sender) deadLetter(ctx context.Context, it *item, f failure) (outcome, time.Duration) {
	n, res, pl := f.n, f.res, f.pl
	dctx, cancel := context.WithTimeout(s.m.hard, 10*time.Second)
	defer cancel()
	held := false
	err := pgx.BeginFunc(dctx, s.m.opts.Pool, func(tx pgx.Tx) error {
		var err error
		if held, err = store.DeliveryEndpointHold(dctx, tx, s.e.Name, s.m.id); err != nil || !held {
			return err
		}
		b := &pgx.Batch{}
		var hdr map[string]string
		if pl.header != nil {
			hdr = headerMap(pl.header)
		}
		store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{
			Endpoint: s.e.Name, EventID: it.eventID, Subject: it.subject, StreamSeq: it.seq, Attempts: n,
			LastStatus: res.status, LastErrorClass: res.class, LastExcerpt: res.excerpt,
			Payload: pl.body, Headers: hdr, OrderingKey: it.key,
		})
		store.QueueDeliveryPendingDone(b, s.e.Name, it.seq, it.key)
		return tx.SendBatch(dctx, b).Close()
	})
	if err != nil {
		// The answer is kept; only the record is tried again (never
		// another request beyond the schedule).
		it.failed = &f
		s.log.Error("delivery: record a dead letter; retrying", "seq", it.seq, "retry_in", s.m.t.prepare, "err", err)
		if it.msg != nil && !s.e.Ordered {
			return s.retryDeadLetter(ctx, it, f)
		}
		return later, s.m.t.prepare
	}
	it.failed = nil
	if !held {
		return notStarted, 0
	}
	if h := s.m.hooks.afterDeadLetter; h != nil && h(it.eventID) {
		return settled, 0
	}
	s.log.Warn("delivery dead-lettered", "event_id", it.eventID, "attempts", n, "last_status", res.status, "error_class", res.class)
	s.m.tracer.TraceDeadLetter(ctx, TraceDeadLetterData{Endpoint: s.e.Name, EventID: it.eventID, Attempts: n,
		LastStatus: res.status, LastClass: StatusClass(res.status, res.class)})
	if s.e.Ordered {
		s.mu.Lock()
		s.deadKeys[it.key] = true
		s.mu.Unlock()
	}
	if m := s.release(it); m != nil {
		if err := m.TermWithReason("delivery schedule spent"); err != nil {
			s.log.Warn("delivery: term", "err", err)
		}
	}
	return settled, 0
}

// retryDeadLetter tries the dead letter's record again until it is
// written or the sender stops, the message kept in progress meanwhile.
func (s *Sender) retryDeadLetter(ctx context.Context, it *item, f failure) (outcome, time.Duration) {
	for sleep(ctx, s.m.t.prepare) {
		if out, d := s.deadLetter(ctx, it, f); out != later {
			return out, d
		}
	}
	return notStarted, 0
}

// noteResult keeps the breaker and the endpoint's failing clock, and
// disables the endpoint once it has failed every attempt for its
// disable_after.
func (s *Sender) noteResult(res result) {
	// Written whatever becomes of the sender meanwhile.
	ctx, cancel := context.WithTimeout(s.m.hard, 10*time.Second)
	defer cancel()
	// The tracer hears of a change under the lock that makes it, so it
	// hears of them in their order.
	s.mu.Lock()
	wasFailing := s.failing
	s.failing = !res.success()
	if res.success() {
		s.fails = 0
	} else {
		s.fails++
	}
	switch {
	case wasFailing && !s.failing:
		s.m.tracer.TraceEndpointState(ctx, TraceEndpointStateData{Endpoint: s.e.Name, State: StateEnabled})
	case !wasFailing && s.failing:
		s.m.tracer.TraceEndpointState(ctx, TraceEndpointStateData{Endpoint: s.e.Name, State: StateFailing})
	}
	s.mu.Unlock()
	// The database's clock follows the answers in the order they are
	// noted here, and a clear that failed is tried again at the next
	// success: an old failure never outlives a recovery.
	s.clockMu.Lock()
	defer s.clockMu.Unlock()
	if res.success() {
		if !s.clockSet {
			return // once per recovery, not per success
		}
		if err := store.DeliveryEndpointRecover(ctx, s.m.opts.Pool, s.e.Name); err != nil {
			s.log.Warn("delivery: record the endpoint's recovery; the next success tries again", "err", err)
			return
		}
		s.clockSet = false
		return
	}
	// Set before the write: a write whose answer was lost may have
	// started the clock.
	s.clockSet = true
	since, failingFor, err := store.DeliveryEndpointFail(ctx, s.m.opts.Pool, s.e.Name)
	if err != nil {
		s.log.Warn("delivery: record the endpoint's failure", "err", err)
		return
	}
	if failingFor >= s.e.DisableAfter {
		s.autoDisable(ctx, since)
	}
}

// autoDisable disables the endpoint after it failed every attempt for
// its disable_after: an alert (log line, the tracer's metric), and
// nothing lost: its durable is paused, its events wait in EVENTS and in
// Postgres until it is enabled again.
func (s *Sender) autoDisable(ctx context.Context, since time.Time) {
	s.mu.Lock()
	if s.disabled {
		s.mu.Unlock()
		return
	}
	s.disabled = true
	s.mu.Unlock()
	reason := "auto: every attempt failed since " + since.UTC().Format(time.RFC3339)
	changed, err := disable(ctx, s.m.opts.Pool, s.m.opts.JS, s.e.Name, reason)
	if err != nil {
		// A durable not paused here is paused by the endpoint's owner at
		// its next beat; a state not written is written at the next
		// failure.
		s.log.Warn("delivery: disable the failing endpoint", "err", err)
		if !changed {
			s.mu.Lock()
			s.disabled = false
			s.mu.Unlock()
		}
	}
	if changed {
		s.log.Error("delivery endpoint disabled: every attempt failed for its disable_after; its events wait until it is enabled",
			"failing_since", since.UTC().Format(time.RFC3339), "disable_after", s.e.DisableAfter)
		s.m.tracer.TraceEndpointState(ctx, TraceEndpointStateData{Endpoint: s.e.Name, State: StateDisabled, Reason: reason})
	}
}

// markPG notes that key has rows in Postgres, which come before its live
// deliveries.
func (s *Sender) markPG(key string) {
	s.mu.Lock()
	ks := s.keyLocked(key)
	ks.pg = true
	ks.gen++
	s.mu.Unlock()
}

func (s *Sender) deadKey(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadKeys[key]
}
