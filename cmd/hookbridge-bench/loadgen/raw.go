package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/pgtemp"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

// Throughput is a raw rate measurement.
type Throughput struct {
	Name        string  `json:"name"`
	Ops         int     `json:"ops"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	Errors      int     `json:"errors"`
	// CPUPerOpUs is this process's CPU time per operation (for Postgres:
	// the client's only).
	CPUPerOpUs float64 `json:"cpu_per_op_us"`
}

func (t *Throughput) setCPU(cpu time.Duration) {
	if t.Ops > 0 {
		t.CPUPerOpUs = float64(cpu.Microseconds()) / float64(t.Ops)
	}
}

func (t Throughput) String() string {
	return fmt.Sprintf("%s: %d ops in %.2fs = %.0f/s (concurrency %d, %d errors, %.0f µs CPU/op in this process)", t.Name, t.Ops, t.Seconds, t.PerSecond, t.Concurrency, t.Errors, t.CPUPerOpUs)
}

// hookMsg is message n as the ingress publishes it: an order body and
// hookbridge's headers on a HOOKS subject.
func hookMsg(runID string, n int) *nats.Msg {
	id := EventID(runID, n)
	body := OrderBody(id, n, time.Now())
	sum := sha256.Sum256(body)
	msg := nats.NewMsg(stream.HookSubject("demo", "order.created"))
	msg.Data = body
	msg.Header.Set(stream.HeaderSource, "demo")
	msg.Header.Set(stream.HeaderEventID, id)
	msg.Header.Set(stream.HeaderEventType, "order.created")
	msg.Header.Set(stream.HeaderBodySHA256, hex.EncodeToString(sum[:]))
	msg.Header.Set(stream.HeaderReceivedAt, time.Now().UTC().Format(time.RFC3339Nano))
	msg.Header.Set(jetstream.MsgIDHeader, stream.MsgID("demo", id))
	return msg
}

// RawPublishSync publishes total ingress-shaped messages to a fresh
// embedded JetStream (file storage, the HOOKS stream configuration,
// in-process connection), from concurrency goroutines that each wait for
// the PubAck before the next publish: the rate an ingress that answers
// only after the PubAck can reach at most with that many requests in
// flight.
func RawPublishSync(ctx context.Context, total, concurrency int) (Throughput, error) {
	env, err := startJetStream(ctx)
	if err != nil {
		return Throughput{}, err
	}
	defer env.close()
	runID := "raw-" + pgtemp.RandomHex(4)
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	// The first failed publish ends the run: a rate with failures in it
	// means nothing, and a stuck server must not hold the run for hours.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cpu0 := ProcessCPU()
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for runCtx.Err() == nil {
				n := int(next.Add(1) - 1)
				if n >= total {
					return
				}
				pctx, pcancel := context.WithTimeout(runCtx, 10*time.Second)
				_, err := env.js.PublishMsg(pctx, hookMsg(runID, n))
				pcancel()
				if err != nil && runCtx.Err() == nil {
					errs.Add(1)
					cancel(fmt.Errorf("publish %d: %w", n, err))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Throughput{}, err
	}
	if err := context.Cause(runCtx); err != nil {
		return Throughput{}, fmt.Errorf("jetstream publish sync: %w", err)
	}
	t := Throughput{Name: "jetstream publish sync", Ops: total, Concurrency: concurrency,
		Seconds: elapsed.Seconds(), PerSecond: float64(total) / elapsed.Seconds(), Errors: int(errs.Load())}
	t.setCPU(ProcessCPU() - cpu0)
	return t, nil
}

// RawPublishAsync publishes total messages like [RawPublishSync] from one
// goroutine without waiting for each PubAck, with up to window
// outstanding, and counts the time until the last PubAck.
func RawPublishAsync(ctx context.Context, total, window int) (Throughput, error) {
	env, err := startJetStream(ctx, jetstream.WithPublishAsyncMaxPending(window), jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return Throughput{}, err
	}
	defer env.close()
	runID := "raw-" + pgtemp.RandomHex(4)
	futures := make([]jetstream.PubAckFuture, 0, total)
	cpu0 := ProcessCPU()
	start := time.Now()
	errs := 0
	for n := range total {
		f, err := env.js.PublishMsgAsync(hookMsg(runID, n))
		if err != nil {
			return Throughput{}, fmt.Errorf("jetstream publish async %d: %w", n, err)
		}
		futures = append(futures, f)
	}
	select {
	case <-env.js.PublishAsyncComplete():
	case <-ctx.Done():
		return Throughput{}, ctx.Err()
	case <-time.After(time.Minute):
		return Throughput{}, fmt.Errorf("async publish: PubAcks still pending after a minute")
	}
	elapsed := time.Since(start)
	cpu := ProcessCPU() - cpu0
	for _, f := range futures {
		select {
		case <-f.Ok():
		case <-f.Err():
			errs++
		}
	}
	t := Throughput{Name: "jetstream publish async", Ops: total, Concurrency: window,
		Seconds: elapsed.Seconds(), PerSecond: float64(total) / elapsed.Seconds(), Errors: errs}
	t.setCPU(cpu)
	return t, nil
}

// RawInsert measures the commit rate of single-row inbox claims (the
// consumer's INSERT, each its own transaction, synchronous_commit as the
// server has it) from concurrency connections, in a fresh database
// created on adminURL's server and dropped afterwards. It is the rate a
// consumer that commits every event on its own can reach at most.
func RawInsert(ctx context.Context, adminURL string, total, concurrency int) (Throughput, error) {
	pool, done, err := migratedPool(ctx, adminURL, "hookbridge_bench_raw", concurrency, schema.Core())
	if err != nil {
		return Throughput{}, err
	}
	defer done()
	var syncCommit string
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit); err != nil {
		return Throughput{}, err
	}
	// Warm every connection so connecting is not measured.
	var warm sync.WaitGroup
	for range concurrency {
		warm.Go(func() { _, _ = pool.Exec(ctx, "SELECT 1") })
	}
	warm.Wait()

	sum := sha256.Sum256([]byte("x"))
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	cpu0 := ProcessCPU()
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := int(next.Add(1) - 1)
				if n >= total {
					return
				}
				// The consumer's own inbox claim; in this fresh database
				// every id is new, so each call inserts its row.
				_, err := store.InboxClaim(ctx, pool, "raw", store.InboxEntry{
					Source: "demo", EventID: fmt.Sprintf("raw-%d", n), EventType: "order.created",
					BodySHA256: sum[:], StreamSeq: uint64(n + 1)})
				if err != nil {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Throughput{}, err
	}
	t := Throughput{Name: "postgres single-row insert (synchronous_commit " + syncCommit + ")", Ops: total, Concurrency: concurrency,
		Seconds: elapsed.Seconds(), PerSecond: float64(total) / elapsed.Seconds(), Errors: int(errs.Load())}
	t.setCPU(ProcessCPU() - cpu0)
	return t, nil
}

// migratedPool creates a fresh database on adminURL's server, opens a pool
// of conns connections to it and applies sets; done closes the pool and
// drops the database.
func migratedPool(ctx context.Context, adminURL, name string, conns int, sets ...schema.Set) (pool *pgxpool.Pool, done func(), err error) {
	db, err := pgtemp.Create(ctx, adminURL, name, "")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err == nil {
		cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
		pool, err = pgxpool.NewWithConfig(ctx, cfg)
	}
	if err != nil {
		_ = db.Drop()
		return nil, nil, err
	}
	done = func() {
		pool.Close()
		_ = db.Drop() // best effort; reported by the caller's next run
	}
	if _, err := schema.Migrate(ctx, pool, sets...); err != nil {
		done()
		return nil, nil, err
	}
	return pool, done, nil
}
