package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/schema"
)

var postponeRetrySchema = schema.Set{Name: "pretry", FS: fstest.MapFS{"0001_init.sql": {Data: []byte(`
CREATE SCHEMA pretry;
CREATE TABLE pretry.orders (key text PRIMARY KEY, paid bool NOT NULL DEFAULT false);
CREATE TABLE pretry.applied (id bigserial PRIMARY KEY, key text NOT NULL, typ text NOT NULL);
`)}}}

// postponeRetryTypes are the event types of the pretry consumer.
var postponeRetryTypes = []string{"order.created", "order.paid", "order.shipped", "order.cancelled", "order.bad", "order.note"}

// postponeRetryHandler: order.created creates the order; order.paid
// postpones until it exists, order.shipped until it is paid; the other
// types need nothing. Each apply is recorded in pretry.applied, in commit
// order.
type postponeRetryHandler struct{}

func (postponeRetryHandler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var b chainBody
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		return consumer.Permanent(err)
	}
	switch ev.Type {
	case "order.created":
		if _, err := tx.Exec(ctx, `INSERT INTO pretry.orders VALUES ($1)`, b.Key); err != nil {
			return err
		}
	case "order.paid":
		tag, err := tx.Exec(ctx, `UPDATE pretry.orders SET paid = true WHERE key = $1`, b.Key)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return consumer.Postpone(fmt.Errorf("%s order.paid needs order.created", b.Key))
		}
	case "order.shipped":
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pretry.orders WHERE key = $1 AND paid)`, b.Key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return consumer.Postpone(fmt.Errorf("%s order.shipped needs order.paid", b.Key))
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO pretry.applied (key, typ) VALUES ($1, $2)`, b.Key, ev.Type)
	return err
}

// publishPretry publishes the events of key o1 in stream order, with ids
// o1-0, o1-1, ...
func publishPretry(t *testing.T, ns *hookbridgetest.JetStream, types ...string) {
	t.Helper()
	for i, typ := range types {
		body, _ := json.Marshal(chainBody{Key: "o1", Step: i})
		ns.PublishKeyedHook(t, "demo", fmt.Sprintf("o1-%d", i), typ, "o1", body)
	}
}

// runPretry runs the keyed pretry consumer with h and the batch size
// (and what set changes) until the test ends or stop is called. The
// backoff is an hour, so a postponed event applies only when it is
// retried after a later one.
func runPretry(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, h consumer.Handler, batch int,
	set ...func(*engine.Options)) (stop func()) {
	t.Helper()
	opts := engine.Options{
		Name: "pretry", EventTypes: postponeRetryTypes, Handler: h, Partitions: stream.DefaultPartitions, BatchSize: batch,
		MaxDeliver: 5, Backoff: []time.Duration{time.Hour}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, f := range set {
		f(&opts)
	}
	c, err := engine.New(db.Pool, ns.JS, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// pretryApplied is the types applied, in commit order.
func pretryApplied(t *testing.T, db *hookbridgetest.Database) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT typ FROM pretry.applied ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A postponed event is tried again right after each later event of its
// key that applies (docs/DESIGN.md, "Order"), before the next one: an
// order.paid that needs only order.created applies before the
// order.cancelled that follows it. So whether the batch has room for one
// event (each tried alone: both postponed ones are tried again after
// order.created, the first postponing again), for two (the later event
// and the first postponed one; the second stays queued), or for all of
// them (tried from the head: the later events after the postponed ones
// are in the same batch).
func TestPostponedIsRetriedAfterEachLaterEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size  int
		types []string // stream order
		want  []string // commit order
	}{
		{1, []string{"order.paid", "order.created", "order.cancelled"},
			[]string{"order.created", "order.paid", "order.cancelled"}},
		{1, []string{"order.shipped", "order.paid", "order.created", "order.cancelled"},
			[]string{"order.created", "order.paid", "order.shipped", "order.cancelled"}},
		{1, []string{"order.paid", "order.shipped", "order.created", "order.cancelled"},
			[]string{"order.created", "order.paid", "order.shipped", "order.cancelled"}},
		{2, []string{"order.paid", "order.shipped", "order.created", "order.cancelled"},
			[]string{"order.created", "order.paid", "order.shipped", "order.cancelled"}},
		{2, []string{"order.shipped", "order.paid", "order.created", "order.cancelled", "order.note"},
			[]string{"order.created", "order.paid", "order.shipped", "order.cancelled", "order.note"}},
		{engine.DefaultBatchSize, []string{"order.paid", "order.created", "order.cancelled"},
			[]string{"order.created", "order.paid", "order.cancelled"}},
		{engine.DefaultBatchSize, []string{"order.shipped", "order.paid", "order.created", "order.cancelled", "order.note"},
			[]string{"order.created", "order.paid", "order.shipped", "order.cancelled", "order.note"}},
	} {
		t.Run(fmt.Sprintf("batch=%d/%s", tc.size, strings.Join(tc.types, ",")), func(t *testing.T) {
			t.Parallel()
			db := hookbridgetest.Postgres(t, postponeRetrySchema)
			ns := hookbridgetest.NATS(t)
			ns.EnsureHooks(t)
			publishPretry(t, ns, tc.types...)
			runPretry(t, db, ns, postponeRetryHandler{}, tc.size)
			db.AwaitCount(t, len(tc.types), `SELECT count(*) FROM pretry.applied`)
			if got := pretryApplied(t, db); !slices.Equal(got, tc.want) {
				t.Fatalf("applied %v, want %v: a postponed event was not tried again right after the later event it needed applied", got, tc.want)
			}
			if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters`); n != 0 {
				t.Fatalf("%d dead letters, want none", n)
			}
		})
	}
}
