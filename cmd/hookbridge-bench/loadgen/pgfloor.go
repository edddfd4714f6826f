package loadgen

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/schema"
)

// PostgresWork is the Postgres CPU an event needs for what the pipeline
// must write, measured with nothing else in the way: one connection,
// batches as large as the consumer's default, no NATS, no HTTP.
type PostgresWork struct {
	Events int `json:"events"`
	Batch  int `json:"batch"`
	// CPUPerEventUs is the backend's CPU per event (user and system
	// time from /proc, so Postgres must run on this machine).
	CPUPerEventUs float64 `json:"cpu_per_event_us"`
	Seconds       float64 `json:"seconds"`
}

// MeasurePostgresWork applies total order.created events in batches of
// batch through the consumer's own set-wise transaction (inbox claim, the
// orders handler's insert and outbox rows, commit) and relays their
// outbox rows the way the relay's round does without publishing (claim,
// key heads, mark sent, commit), on one connection to a fresh database
// created on adminURL's server. It is what an event's writes cost
// Postgres at the consumer's default batch size with no contention: the
// pipeline, with smaller batches and several writers, spends more.
func MeasurePostgresWork(ctx context.Context, adminURL string, total, batch int) (PostgresWork, error) {
	pool, done, err := migratedPool(ctx, adminURL, "hookbridge_bench_pgwork", 1, schema.Core(), orders.Migrations())
	if err != nil {
		return PostgresWork{}, err
	}
	defer done()
	var pid int32
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return PostgresWork{}, err
	}
	h := orders.Handler("orders")
	evs := make([]consumer.Event, 0, batch)
	cpu0, start := procCPU(int(pid)), time.Now()
	if cpu0 == 0 {
		return PostgresWork{}, fmt.Errorf("cannot read the CPU time of backend %d from /proc: Postgres must run on this machine, in this PID namespace", pid)
	}
	for n := 0; n < total; {
		evs = evs[:0]
		for ; len(evs) < batch && n < total; n++ {
			body := orders.WebhookBody("order.created", fmt.Sprintf("pgwork-%d", n), 1999)
			evs = append(evs, consumer.Event{Source: "demo", ID: fmt.Sprintf("evt-pgwork-%d", n), Type: "order.created",
				Body: body, BodySHA256: sha256.Sum256(body), Subject: "hooks.demo.order.created", StreamSeq: uint64(n + 1),
				NumDelivered: 1, ReceivedAt: time.Now()})
		}
		for i, r := range engine.ApplyBatch(ctx, pool, "orders", h, evs) {
			if r.Err != nil || r.Outcome != consumer.Processed {
				return PostgresWork{}, fmt.Errorf("apply %s: %s %v", evs[i].ID, r.Outcome, r.Err)
			}
		}
		if err := markRelayed(ctx, pool, batch); err != nil {
			return PostgresWork{}, err
		}
	}
	elapsed := time.Since(start)
	cpu := procCPU(int(pid)) - cpu0
	counts, err := store.OutboxStats(ctx, pool)
	if err != nil {
		return PostgresWork{}, err
	}
	if counts.Pending != 0 || counts.Dead != 0 || counts.Sent != int64(total) {
		return PostgresWork{}, fmt.Errorf("outbox holds %d pending, %d dead, %d sent rows; want %d sent", counts.Pending, counts.Dead, counts.Sent, total)
	}
	return PostgresWork{Events: total, Batch: batch, Seconds: elapsed.Seconds(),
		CPUPerEventUs: float64(cpu.Microseconds()) / float64(total)}, nil
}

// markRelayed does the relay's Postgres work for up to limit messages:
// the claim of rows and of packs (the orders handler's apply writes packs),
// the ordering-key heads, marking them sent with made-up stream
// sequences, and the commit.
func markRelayed(ctx context.Context, pool *pgxpool.Pool, limit int) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := store.OutboxClaim(ctx, tx, "60000", limit)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		packs, err := store.OutboxPackClaim(ctx, tx, limit)
		if err != nil {
			return fmt.Errorf("claim packs: %w", err)
		}
		perKey := map[string]int32{}
		sent := make([]store.OutboxMarkSentParams, len(rows))
		var maxSeq int64
		for i, o := range rows {
			sent[i] = store.OutboxMarkSentParams{ID: o.ID, StreamSeq: o.ID}
			if o.OrderingKey != nil {
				perKey[*o.OrderingKey]++
				maxSeq = max(maxSeq, *o.KeySeq)
			}
		}
		firsts, packsSent := make([]int64, len(packs)), make([]store.OutboxPackMarkSentParams, len(packs))
		for i, p := range packs {
			seqs := make([]int64, len(p.EventIDs))
			for j := range p.EventIDs {
				seqs[j] = p.FirstID + int64(j)
			}
			firsts[i], packsSent[i] = p.FirstID, store.OutboxPackMarkSentParams{FirstID: p.FirstID, StreamSeqs: seqs}
			for j, k := range p.Keys {
				if k != nil {
					perKey[*k]++
					maxSeq = max(maxSeq, p.KeySeq+int64(j))
				}
			}
		}
		want := make([]store.OutboxKeyHeadsParams, 0, len(perKey))
		for k, c := range perKey {
			want = append(want, store.OutboxKeyHeadsParams{Key: k, Count: c + 1})
		}
		if len(want) > 0 {
			if _, _, err := store.OutboxKeyHeadsAndPacksAhead(ctx, tx, want, maxSeq+1, firsts); err != nil {
				return fmt.Errorf("key heads: %w", err)
			}
		}
		b := &pgx.Batch{}
		store.QueueOutboxMarkSent(b, sent)
		if len(packs) > 0 {
			store.QueueOutboxPackMarkSent(b, packsSent)
		}
		return tx.SendBatch(ctx, b).Close()
	})
}
