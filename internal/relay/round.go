package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// outRow is one claimed outbox message: a row of outbox_rows, or a
// message of a pack.
type outRow struct {
	id          int64
	eventID     string
	subject     string
	headers     []byte
	payload     []byte
	key         *string
	keySeq      *int64
	attempts    int
	nextAttempt time.Time
	createdAt   time.Time    // a pack's, kept when its messages become rows
	pack        *claimedPack // nil for a row
}

// fromStore converts claimed rows into the relay's working form.
func fromStore(rs []store.OutboxRow) []*outRow {
	out := make([]*outRow, len(rs))
	for i, s := range rs {
		out[i] = &outRow{
			id: s.ID, eventID: s.EventID, subject: s.Subject, headers: s.Headers, payload: s.Payload,
			key: s.OrderingKey, keySeq: s.KeySeq, attempts: s.Attempts, nextAttempt: s.NextAttempt,
		}
	}
	return out
}

// roundResult counts what one round did.
type roundResult struct {
	claimed   int  // rows locked by the claim (including extra key heads)
	full      bool // the claim returned as many rows as its limit
	published int  // rows marked sent
	failed    int  // rows whose attempt failed (rescheduled or dead)
	deferred  int  // rows pushed behind a key head that is backing off
	// dueBehind and heldElsewhere are plan's (see planned).
	dueBehind, heldElsewhere bool
}

// progress reports whether the round changed any row.
func (r roundResult) progress() bool { return r.published+r.failed+r.deferred > 0 }

// again reports whether another round right away may find more work: the
// round changed rows and either its claim hit the limit (more due rows may
// be waiting), it left claimed rows untouched (rows behind a key head
// another relay held, which may be free now), or a due row it did not
// claim follows one of its chains. Otherwise every row due at the claim was
// dealt with, and rows committed since then notify: going round again at
// once would only claim nothing, at three round trips.
func (r roundResult) again() bool {
	return r.progress() && (r.full || r.dueBehind || r.claimed > r.published+r.failed+r.deferred)
}

// failure is a failed publish attempt of one row.
type failure struct {
	row       *outRow
	err       error
	permanent bool // can never succeed: the row goes dead now
	ambiguous bool // the message may have been stored
	// full: EVENTS (or the server's store) refused for lack of room. The
	// row is retried with backoff but the attempt is not counted toward
	// MaxAttempts: a full broker must not turn pending rows dead.
	full bool
}

// outcome is what publishing a batch produced.
type outcome struct {
	sent    []*outRow
	seqs    []int64
	fails   []failure
	blocked []blockedRow // rows left behind a failed row of their key
}

type blockedRow struct {
	row     *outRow
	blocker int64 // id of the earlier row of the same key
}

// round claims up to BatchSize due rows, publishes them and records the
// outcome, all in one transaction: a relay that dies mid-round releases its
// claim with its connection, and the rows are published again (same
// Nats-Msg-Id) by whoever claims them next.
func (r *Relay) round(ctx context.Context) (roundResult, error) {
	var res roundResult
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if nc := r.pub.Conn(); nc != nil && !nc.IsConnected() {
		return res, ErrNotConnected
	}
	if !r.ensured.Load() {
		ectx, cancel := context.WithTimeout(ctx, r.opts.PublishTimeout)
		err := stream.EnsureExists(ectx, r.js, stream.EventsConfig(r.opts.Stream))
		cancel()
		if err != nil {
			return res, err
		}
		r.ensured.Store(true)
	}

	// Once rows are claimed the round finishes even if ctx is cancelled:
	// marking what was published saves republishing it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.PublishTimeout+30*time.Second)
	defer cancel()

	// READ COMMITTED whatever the connection's default: the key-head read
	// needs a fresh snapshot, and FOR UPDATE must not raise serialization
	// failures when another relay just marked a row.
	tx, err := r.pool.BeginTx(rctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return res, fmt.Errorf("outbox claim: begin: %w", err)
	}
	defer tx.Rollback(rctx) //nolint:errcheck // no-op after commit

	rows, err := r.claim(rctx, tx)
	if err != nil {
		return res, err
	}
	packs, packed, err := r.claimPacks(rctx, tx)
	if err != nil {
		return res, err
	}
	res.full = len(rows) >= r.opts.BatchSize || len(packed) >= r.opts.BatchSize
	rows = append(rows, packed...)
	res.claimed = len(rows)
	if len(rows) == 0 {
		return res, tx.Commit(rctx)
	}
	p, err := r.plan(rctx, tx, rows)
	if err != nil {
		return res, err
	}
	chains, deferred := p.chains, p.deferred
	res.claimed += p.extra
	res.dueBehind, res.heldElsewhere = p.dueBehind, p.heldElsewhere

	out := r.publishTraced(ctx, chains)
	if h := r.hooks.afterPublish; h != nil {
		ids := make([]string, 0, len(out.sent))
		for _, o := range out.sent {
			ids = append(ids, o.eventID)
		}
		if err := h(ids); err != nil {
			return res, err
		}
	}
	deferred = append(deferred, out.blocked...)
	nDeferred, err := r.record(rctx, tx, out, deferred, packs)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(rctx); err != nil {
		return res, fmt.Errorf("outbox: commit round: %w", err)
	}
	res.published = len(out.sent)
	res.failed = len(out.fails)
	res.deferred = nDeferred
	r.logOutcome(ctx, out)
	return res, nil
}

// claim locks up to BatchSize due pending rows, oldest due first. SKIP
// LOCKED lets concurrent relays take disjoint rows without waiting.
func (r *Relay) claim(ctx context.Context, tx pgx.Tx) ([]*outRow, error) {
	// A relay stuck with an open transaction (hung process, partition)
	// loses its session and with it the claim.
	idle := r.opts.PublishTimeout + 10*time.Second
	rows, err := store.OutboxClaim(ctx, tx, fmt.Sprint(idle.Milliseconds()), r.opts.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("outbox claim: %w", err)
	}
	return fromStore(rows), nil
}

// plan turns the claimed messages into publish chains: every unkeyed
// message is a chain of its own; the messages of one ordering key form one
// chain in key_seq order, and only if the chain starts at the key's oldest
// pending message and has no gap. Messages of a key that cannot be
// published now stay claimed but untouched, or are deferred to their
// blocker's next attempt when the blocker is backing off (so they stop
// filling the front of the queue).
func (r *Relay) plan(ctx context.Context, tx pgx.Tx, rows []*outRow) (planned, error) {
	var p planned
	mine := make(map[int64]*outRow, len(rows))
	perKey := map[string]int{}
	for _, o := range rows {
		mine[o.id] = o
		if o.key == nil {
			p.chains = append(p.chains, []*outRow{o})
		} else {
			perKey[*o.key]++
		}
	}
	if len(perKey) == 0 {
		return p, nil
	}
	heads, after, err := r.keyHeads(ctx, tx, rows, perKey)
	if err != nil {
		return planned{}, err
	}
	extra, err := r.lockDueHeads(ctx, tx, heads, mine)
	if err != nil {
		return planned{}, err
	}
	p.extra = extra
	waiting := p.chainKeys(rows, heads, after, mine)
	p.holdBackPacks(waiting)
	return p, nil
}

// head is one of the first pending messages of an ordering key: a row of
// outbox_rows, a message of a pack this round holds, or (pack) a pending
// pack another relay holds, standing for its messages of the key.
type head struct {
	id     int64
	keySeq int64
	due    bool
	next   time.Time
	pack   bool
}

// noKeySeq sorts a row written with triggers off (no key_seq) after the
// key's numbered rows, as the key heads query does.
const noKeySeq = math.MaxInt64

// keyHeads reads, for each ordering key among the claimed messages, its
// first pending messages in key_seq order, as many as this round claimed
// of the key, and the one after them (see dueBehind), which is only looked
// at. The statements have a fresh snapshot: messages of the key another
// relay published meanwhile are gone from it, and any message of the key
// visible at claim time is still there (key_seq is commit order, so one
// committed since cannot sort before one claimed).
func (r *Relay) keyHeads(ctx context.Context, tx pgx.Tx, rows []*outRow, perKey map[string]int) (map[string][]head, map[string]head, error) {
	want := make([]store.OutboxKeyHeadsParams, 0, len(perKey))
	for k, n := range perKey {
		want = append(want, store.OutboxKeyHeadsParams{Key: k, Count: int32(n + 1)})
	}
	before, packIDs := int64(0), []int64{}
	heads := map[string][]head{}
	held := map[*claimedPack]bool{}
	for _, o := range rows {
		if p := o.pack; p != nil && !held[p] {
			held[p] = true
			packIDs = append(packIDs, p.firstID)
		}
		if o.key == nil {
			continue
		}
		before = max(before, keySeqOf(o)+1)
		if o.pack != nil {
			heads[*o.key] = append(heads[*o.key], head{id: o.id, keySeq: *o.keySeq, due: true, next: o.nextAttempt})
		}
	}
	hs, ahead, err := store.OutboxKeyHeadsAndPacksAhead(ctx, tx, want, before, packIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("outbox key heads: %w", err)
	}
	for _, h := range hs {
		seq := int64(noKeySeq)
		if h.KeySeq != nil {
			seq = *h.KeySeq
		}
		heads[h.Key] = append(heads[h.Key], head{id: h.ID, keySeq: seq, due: h.Due, next: h.Next})
	}
	for k, hs := range packsAhead(ahead) {
		heads[k] = append(heads[k], hs...)
	}
	// The extra message is only looked at, never claimed or published here.
	after := map[string]head{}
	for k, hs := range heads {
		slices.SortFunc(hs, func(a, b head) int { return cmp.Or(cmp.Compare(a.keySeq, b.keySeq), cmp.Compare(a.id, b.id)) })
		if n := perKey[k]; len(hs) > n {
			after[k], heads[k] = hs[n], hs[:n]
		}
	}
	return heads, after, nil
}

func keySeqOf(o *outRow) int64 {
	if o.keySeq == nil {
		return noKeySeq - 1
	}
	return *o.keySeq
}

// lockDueHeads locks the due rows ahead of ours that this round did not
// claim (the claim's LIMIT cut them off, or a tie in next_attempt_at put
// them behind) if nobody else holds them, so a key's head is never
// starved, and returns how many it locked.
func (r *Relay) lockDueHeads(ctx context.Context, tx pgx.Tx, heads map[string][]head, mine map[int64]*outRow) (int, error) {
	var want []int64
	for _, hs := range heads {
		for _, h := range hs {
			if mine[h.id] != nil {
				continue
			}
			if !h.due || h.pack {
				break
			}
			want = append(want, h.id)
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	locked, err := store.OutboxClaimIDs(ctx, tx, want)
	if err != nil {
		return 0, fmt.Errorf("outbox claim key heads: %w", err)
	}
	more := fromStore(locked)
	for _, o := range more {
		mine[o.id] = o
	}
	return len(more), nil
}

// chainKeys makes each key's chain from its heads: the longest prefix of
// messages this round holds. The first message it does not hold is the
// blocker. It returns the messages left waiting behind a blocker in flight
// elsewhere.
func (p *planned) chainKeys(rows []*outRow, heads map[string][]head, after map[string]head, mine map[int64]*outRow) []*outRow {
	var waiting []*outRow
	inChain := map[int64]bool{}
	for k, hs := range heads {
		var chain []*outRow
		var blocker *head
		for i, h := range hs {
			o := mine[h.id]
			if o == nil || h.pack {
				blocker = &hs[i]
				break
			}
			chain = append(chain, o)
			inChain[o.id] = true
		}
		if len(chain) > 0 {
			p.chains = append(p.chains, chain)
			// The key's next message is due and not ours: another relay's
			// claim behind our chain, or one our claim's LIMIT left out.
			if next, ok := after[k]; ok && blocker == nil && next.due && (next.pack || mine[next.id] == nil) {
				p.dueBehind = true
			}
		}
		if blocker == nil {
			continue
		}
		if blocker.due {
			// Blocked by a message in flight elsewhere: leave ours as they
			// are, and look again soon.
			p.heldElsewhere = true
			for _, o := range rows {
				if o.key != nil && *o.key == k && !inChain[o.id] {
					waiting = append(waiting, o)
				}
			}
			continue
		}
		for _, o := range rows {
			if o.key != nil && *o.key == k && !inChain[o.id] && o.nextAttempt.Before(blocker.next) {
				p.deferred = append(p.deferred, blockedRow{row: o, blocker: blocker.id})
			}
		}
	}
	return waiting
}

// holdBackPacks leaves untouched, whole, every pack with a message
// waiting behind one in flight elsewhere: publishing the rest of such a
// pack would turn it into rows (costing WAL), when the other relay will be
// done in a moment. Each chain is cut before the first message of a pack
// held back, and the packs of the messages cut with it are held back
// too, until no chain holds a message of one. A pack with a message
// deferred behind a row backing off is not held back: that can take
// minutes, and its other keys go on.
func (p *planned) holdBackPacks(waiting []*outRow) {
	held := map[*claimedPack]bool{}
	for _, o := range waiting {
		if o.pack != nil {
			held[o.pack] = true
		}
	}
	for changed := len(held) > 0; changed; {
		changed = false
		for i, c := range p.chains {
			for j, o := range c {
				if o.pack == nil || !held[o.pack] {
					continue
				}
				for _, rest := range c[j+1:] {
					if rest.pack != nil && !held[rest.pack] {
						held[rest.pack], changed = true, true
					}
				}
				p.chains[i] = c[:j]
				break
			}
		}
	}
	if len(held) == 0 {
		return
	}
	p.chains = slices.DeleteFunc(p.chains, func(c []*outRow) bool { return len(c) == 0 })
	p.deferred = slices.DeleteFunc(p.deferred, func(d blockedRow) bool { return d.row.pack != nil && held[d.row.pack] })
}

// planned is what plan made of a round's claimed rows.
type planned struct {
	chains   [][]*outRow
	deferred []blockedRow
	extra    int // due key heads locked beyond the claim
	// dueBehind: a key's chain is published here while its next row is
	// due but not claimed by this round. Another relay may hold it and be
	// able to do nothing with it (its claim of the key is behind the rows
	// this round publishes, and nothing will notify it once they are
	// sent), or this round's LIMIT left it out. This relay goes round
	// again for it.
	dueBehind bool
	// heldElsewhere: rows of a key stay untouched behind a due row that
	// another relay holds. Once that relay is done they can go, but
	// nothing notifies this one: it looks again after BackoffBase.
	heldElsewhere bool
}

// publish sends the chains in waves: wave i holds the i-th row of every
// chain still going, published asynchronously in id order; the next row of
// a chain is only sent after the previous one's PubAck. So one key never
// has two messages in flight and a failure cannot let a later row of its
// key overtake it. Everything must be acknowledged within PublishTimeout.
func (r *Relay) publish(ctx context.Context, chains [][]*outRow) outcome {
	var out outcome
	deadline := time.NewTimer(r.opts.PublishTimeout)
	defer deadline.Stop()
	expired := false

	pos := make([]int, len(chains))
	active := make([]int, len(chains))
	for i := range chains {
		active[i] = i
	}
	for len(active) > 0 && !expired {
		slices.SortFunc(active, func(a, b int) int {
			return cmp.Compare(chains[a][pos[a]].id, chains[b][pos[b]].id)
		})
		wave := make([]inflight, 0, len(active))
		for _, c := range active {
			o := chains[c][pos[c]]
			rctx, f, fail := r.send(ctx, o)
			wave = append(wave, inflight{chain: c, row: o, f: f, fail: fail, ctx: rctx})
		}
		expired = r.awaitWave(wave, deadline)
		active = r.settleWave(&out, wave, chains, pos, active[:0])
	}
	// Chains cut by the deadline between waves keep their remaining rows
	// pending and untouched; the next round continues them.
	return out
}

// inflight is a row of the wave being published.
type inflight struct {
	chain int
	row   *outRow
	f     jetstream.PubAckFuture
	ack   *jetstream.PubAck
	fail  *failure
	ctx   context.Context // the row's, from TraceRelayPublishStart
}

// awaitWave waits for the PubAck or error of every row of wave that was
// sent, and reports whether the deadline expired. Once it has, rows are
// not waited for: what has not answered yet fails as ambiguous.
func (r *Relay) awaitWave(wave []inflight, deadline *time.Timer) (expired bool) {
	for i := range wave {
		w := &wave[i]
		if w.fail != nil {
			continue
		}
		if !expired {
			select {
			case w.ack = <-w.f.Ok():
			case err := <-w.f.Err():
				w.fail = classify(w.row, err)
			case <-deadline.C:
				expired = true
			}
		}
		if expired && w.ack == nil && w.fail == nil {
			select {
			case w.ack = <-w.f.Ok():
			case err := <-w.f.Err():
				w.fail = classify(w.row, err)
			default:
				w.fail = &failure{row: w.row, err: fmt.Errorf("no PubAck within %s", r.opts.PublishTimeout), ambiguous: true}
			}
		}
	}
	return expired
}

// settleWave adds the answered wave to out and advances pos; it returns
// next with the chains that go on to the next wave appended. A failed row
// blocks the rest of its chain.
func (r *Relay) settleWave(out *outcome, wave []inflight, chains [][]*outRow, pos []int, next []int) []int {
	for _, w := range wave {
		r.tracePublishEnd(w.ctx, w.row, w.ack, w.fail)
		if w.fail != nil {
			out.fails = append(out.fails, *w.fail)
			if errors.Is(w.fail.err, jetstream.ErrNoStreamResponse) {
				r.ensured.Store(false) // the stream may be gone: re-create it next round
			}
			for _, rest := range chains[w.chain][pos[w.chain]+1:] {
				out.blocked = append(out.blocked, blockedRow{row: rest, blocker: w.row.id})
			}
			continue
		}
		out.sent = append(out.sent, w.row)
		out.seqs = append(out.seqs, int64(w.ack.Sequence))
		if h := r.hooks.acked; h != nil {
			h(w.row.eventID, w.ack)
		}
		pos[w.chain]++
		if pos[w.chain] < len(chains[w.chain]) {
			next = append(next, w.chain)
		}
	}
	return next
}

// send starts the asynchronous publish of one row. The context returned
// is the row's tracing context, handed back to tracePublishEnd.
func (r *Relay) send(ctx context.Context, o *outRow) (context.Context, jetstream.PubAckFuture, *failure) {
	hdr, err := decodeHeaders(o.headers)
	if err == nil {
		err = checkSubject(o.subject)
	}
	if t := r.opts.Tracer; t != nil {
		ctx = t.TraceRelayPublishStart(ctx, TraceRelayPublishStartData{EventID: o.eventID, Subject: o.subject, Header: hdr})
	}
	f, fail := r.sendChecked(o, hdr, err)
	return ctx, f, fail
}

func (r *Relay) sendChecked(o *outRow, hdr nats.Header, err error) (jetstream.PubAckFuture, *failure) {
	if err != nil {
		return nil, &failure{row: o, err: err, permanent: true}
	}
	if h := r.hooks.beforePublish; h != nil {
		if err := h(o.eventID); err != nil {
			return nil, &failure{row: o, err: err}
		}
	}
	msg := &nats.Msg{Subject: o.subject, Data: o.payload, Header: hdr}
	f, err := r.pub.PublishMsgAsync(msg,
		jetstream.WithMsgID(o.eventID),
		jetstream.WithExpectStream(stream.Events),
		// No client-side retry on "no responders": our own backoff retries,
		// and a late client retry could not reorder anything anyway.
		jetstream.WithRetryAttempts(0))
	if err != nil {
		return nil, classify(o, err)
	}
	return f, nil
}

// tracePublishEnd reports one row's PubAck or failure to the tracer.
func (r *Relay) tracePublishEnd(ctx context.Context, o *outRow, ack *jetstream.PubAck, fail *failure) {
	t := r.opts.Tracer
	if t == nil {
		return
	}
	d := TraceRelayPublishEndData{EventID: o.eventID}
	switch {
	case fail != nil:
		d.Err = fail.err
	case ack != nil:
		d.Seq = ack.Sequence
	}
	t.TraceRelayPublishEnd(ctx, d)
}

// classify decides what a publish error means for the row.
func classify(o *outRow, err error) *failure {
	f := &failure{row: o, err: err}
	var apiErr *jetstream.APIError
	switch {
	case stream.StorageRefusal(err) != "":
		// Refused for lack of room: not stored, and not the row's fault.
		f.full = true
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrHeadersNotSupported):
		f.permanent = true
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.As(err, &apiErr),
		errors.Is(err, jetstream.ErrTooManyStalledMsgs), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionDraining):
		// Refused or never sent: definitely not stored.
	default:
		// Timeout, lost connection, anything unknown: maybe stored.
		f.ambiguous = true
	}
	return f
}

// record writes a round's outcome in the claiming transaction and returns
// how many messages it deferred.
func (r *Relay) record(ctx context.Context, tx pgx.Tx, out outcome, deferred []blockedRow, packs []*claimedPack) (int, error) {
	b := &pgx.Batch{}
	r.queueRowsSent(b, out)
	r.queueRowsFailed(b, out)
	r.queuePacks(b, packs, newOutcomes(out, deferred))
	if len(deferred) > 0 {
		rows := make([]store.OutboxDeferParams, len(deferred))
		for i, d := range deferred {
			rows[i] = store.OutboxDeferParams{ID: d.row.id, Blocker: d.blocker}
		}
		// Runs after the failure update and the unpacking above, so it
		// sees the blockers' new next_attempt_at and the rows of
		// unpacked messages; a blocker that went dead blocks nothing.
		store.QueueOutboxDefer(b, rows)
	}
	if b.Len() == 0 {
		return 0, nil
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	var tag pgconn.CommandTag
	for range b.Len() {
		var err error
		if tag, err = br.Exec(); err != nil {
			return 0, fmt.Errorf("outbox: record outcome: %w", err)
		}
	}
	n := 0
	if len(deferred) > 0 {
		n = int(tag.RowsAffected()) // the deferral is the last statement
	}
	return n, br.Close()
}

// queueRowsSent queues marking the published rows of outbox_rows sent, or
// deleting them when sent messages are not kept.
func (r *Relay) queueRowsSent(b *pgx.Batch, out outcome) {
	var ids []int64
	var sent []store.OutboxMarkSentParams
	for i, o := range out.sent {
		if o.pack == nil {
			ids, sent = append(ids, o.id), append(sent, store.OutboxMarkSentParams{ID: o.id, StreamSeq: out.seqs[i]})
		}
	}
	switch {
	case len(ids) == 0:
	case r.keepSent():
		store.QueueOutboxMarkSent(b, sent)
	default:
		store.QueueOutboxDeleteSent(b, ids)
	}
}

// queueRowsFailed queues recording the failed attempts of rows of
// outbox_rows (failed messages of packs become rows with theirs).
func (r *Relay) queueRowsFailed(b *pgx.Batch, out outcome) {
	var fails []failure
	for _, f := range out.fails {
		if f.row.pack == nil {
			fails = append(fails, f)
		}
	}
	if len(fails) == 0 {
		return
	}
	rows := make([]store.OutboxMarkFailedParams, len(fails))
	for i, f := range fails {
		rows[i] = store.OutboxMarkFailedParams{
			ID:        f.row.id,
			Error:     shortError(f.err),
			DelayUs:   r.retryDelay(f.row.attempts+1, f.ambiguous).Microseconds(),
			Permanent: f.permanent,
			Counted:   !f.full,
		}
	}
	store.QueueOutboxMarkFailed(b, rows, r.opts.MaxAttempts)
}

func (r *Relay) logOutcome(ctx context.Context, out outcome) {
	if len(out.sent) > 0 {
		r.log.DebugContext(ctx, "outbox rows published", "rows", len(out.sent))
	}
	for i, f := range out.fails {
		if i == 10 {
			r.log.WarnContext(ctx, "outbox publish failures (more not logged)", "failed", len(out.fails))
			break
		}
		dead := f.permanent || (!f.full && f.row.attempts+1 >= r.opts.MaxAttempts)
		lvl := "outbox publish failed, will retry"
		if dead {
			lvl = "outbox row is dead"
		}
		r.log.WarnContext(ctx, lvl, "event_id", f.row.eventID, "subject", f.row.subject,
			"attempts", f.row.attempts+1, "err", shortError(f.err))
	}
}

// shortError is an error text fit for last_error and logs: the rule the
// consumer's dead letters follow too (internal/errtext).
func shortError(err error) string { return errtext.Short(err.Error()) }

// decodeHeaders reads the row's headers column (a JSON object of strings).
func decodeHeaders(raw []byte) (nats.Header, error) {
	hdr := nats.Header{}
	if len(raw) == 0 {
		return hdr, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New("headers column is not a JSON object of strings")
	}
	for k, v := range m {
		if err := stream.CheckHeader(k, v); err != nil {
			return nil, err
		}
		hdr[k] = []string{v}
	}
	return hdr, nil
}

// checkSubject refuses subjects NATS would reject or treat as wildcards.
func checkSubject(s string) error {
	if s == "" {
		return errors.New("empty subject")
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return fmt.Errorf("invalid subject %q", s)
		}
	}
	return nil
}
