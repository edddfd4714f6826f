package relay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/internal/store"
)

// claimedPack is a pack this round holds: the messages one transaction
// enqueued in one call, each an outRow of its own (msgs[i].id is
// firstID+i).
type claimedPack struct {
	firstID int64
	msgs    []*outRow
}

// claimPacks locks pending packs in key_seq order until they carry
// BatchSize messages (at least one pack) and returns their messages.
func (r *Relay) claimPacks(ctx context.Context, tx pgx.Tx) ([]*claimedPack, []*outRow, error) {
	ps, err := store.OutboxPackClaim(ctx, tx, r.opts.BatchSize)
	if err != nil {
		return nil, nil, fmt.Errorf("outbox claim packs: %w", err)
	}
	packs := make([]*claimedPack, len(ps))
	var rows []*outRow
	for i, p := range ps {
		packs[i] = unpack(p)
		rows = append(rows, packs[i].msgs...)
	}
	return packs, rows, nil
}

// unpack turns a claimed pack into its messages: due since the pack was
// written, never attempted.
func unpack(p store.OutboxPack) *claimedPack {
	c := &claimedPack{firstID: p.FirstID, msgs: make([]*outRow, len(p.EventIDs))}
	for i := range p.EventIDs {
		o := &outRow{
			id: p.FirstID + int64(i), eventID: p.EventIDs[i], subject: p.Subjects[i], payload: p.Payloads[i],
			nextAttempt: p.CreatedAt, createdAt: p.CreatedAt, pack: c,
		}
		if i < len(p.Headers) && p.Headers[i] != nil {
			o.headers = []byte(*p.Headers[i])
		}
		if i < len(p.Keys) && p.Keys[i] != nil {
			seq := p.KeySeq + int64(i)
			o.key, o.keySeq = p.Keys[i], &seq
		}
		c.msgs[i] = o
	}
	return c
}

// outcomes is what a round did to each message it claimed.
type outcomes struct {
	seq      map[*outRow]int64 // published, with its stream sequence
	fail     map[*outRow]failure
	deferred map[*outRow]bool // behind a row backing off (the deferral moves them)
}

func newOutcomes(out outcome, deferred []blockedRow) outcomes {
	oc := outcomes{seq: map[*outRow]int64{}, fail: map[*outRow]failure{}, deferred: map[*outRow]bool{}}
	for i, o := range out.sent {
		oc.seq[o] = out.seqs[i]
	}
	for _, f := range out.fails {
		oc.fail[f.row] = f
	}
	for _, d := range deferred {
		oc.deferred[d.row] = true
	}
	return oc
}

// queuePacks records what happened to the claimed packs: a pack published
// whole is marked sent (or deleted when sent messages are not kept); a
// pack none of whose messages was touched stays as it is; any other pack
// becomes rows, one per message with its outcome, so that failed messages
// are retried or die one by one and the others keep their place behind
// them. It returns how many messages it moved to rows.
func (r *Relay) queuePacks(b *pgx.Batch, packs []*claimedPack, oc outcomes) int {
	var gone []int64
	var sent []store.OutboxPackMarkSentParams
	var u []store.OutboxInsertUnpackedParams
	for _, p := range packs {
		published, touched := 0, 0
		for _, o := range p.msgs {
			if _, ok := oc.seq[o]; ok {
				published++
				touched++
			}
			if _, failed := oc.fail[o]; failed || oc.deferred[o] {
				touched++
			}
		}
		switch {
		case published == len(p.msgs) && r.keepSent():
			seqs := make([]int64, len(p.msgs))
			for i, o := range p.msgs {
				seqs[i] = oc.seq[o]
			}
			sent = append(sent, store.OutboxPackMarkSentParams{FirstID: p.firstID, StreamSeqs: seqs})
		case published == len(p.msgs):
			gone = append(gone, p.firstID)
		case touched > 0:
			for _, o := range p.msgs {
				r.addUnpacked(&u, o, oc)
			}
			gone = append(gone, p.firstID)
		}
	}
	if len(u) > 0 {
		store.QueueOutboxInsertUnpacked(b, u)
	}
	if len(gone) > 0 {
		store.QueueOutboxPackDelete(b, gone)
	}
	if len(sent) > 0 {
		store.QueueOutboxPackMarkSent(b, sent)
	}
	return len(u)
}

// addUnpacked adds message o, with its outcome, to the rows u will
// insert: published (kept as sent, or left out when sent messages are not
// kept), failed (as a failed row's attempt is recorded), or pending and
// due now.
func (r *Relay) addUnpacked(u *[]store.OutboxInsertUnpackedParams, o *outRow, oc outcomes) {
	status, attempts, delay := "pending", int32(0), int64(0)
	var errText *string
	var seq *int64
	if s, ok := oc.seq[o]; ok {
		if !r.keepSent() {
			return
		}
		status, seq = "sent", &s
	}
	if f, ok := oc.fail[o]; ok {
		if !f.full {
			attempts = 1
		}
		if f.permanent || (!f.full && attempts >= int32(r.opts.MaxAttempts)) {
			status = "dead"
		}
		e := shortError(f.err)
		errText = &e
		delay = r.retryDelay(1, f.ambiguous).Microseconds()
	}
	var headers *string
	if len(o.headers) > 0 {
		h := string(o.headers)
		headers = &h
	}
	*u = append(*u, store.OutboxInsertUnpackedParams{
		ID:          o.id,
		EventID:     o.eventID,
		Subject:     o.subject,
		Headers:     headers,
		Payload:     o.payload,
		OrderingKey: o.key,
		KeySeq:      o.keySeq,
		CreatedAt:   o.createdAt,
		Status:      status,
		Attempts:    attempts,
		Error:       errText,
		DelayUs:     delay,
		StreamSeq:   seq,
	})
}

// keepSent reports whether published messages are kept (until Retention
// deletes them) rather than deleted as they are published.
func (r *Relay) keepSent() bool { return !r.opts.DeleteSent }

// packsAhead indexes the pending packs held elsewhere that come before
// this round's messages, by ordering key.
func packsAhead(ahead []store.OutboxPackAhead) map[string][]head {
	out := map[string][]head{}
	for _, a := range ahead {
		for _, k := range a.Keys {
			if k != nil {
				// Every message of such a pack comes before ours (key_seq
				// values step by 1024 between packs), so the pack stands
				// for them at its own key_seq. It is due and held
				// elsewhere: whoever holds it publishes it first.
				out[*k] = append(out[*k], head{id: a.FirstID, keySeq: a.KeySeq, due: true, pack: true})
			}
		}
	}
	return out
}
