package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
CREATE TABLE pretry.orders (key text PRIMARY KEY);
CREATE TABLE pretry.applied (id bigserial PRIMARY KEY, key text NOT NULL, typ text NOT NULL);
`)}}}

// postponeRetryTypes are the event types of the pretry consumer.
var postponeRetryTypes = []string{"order.created", "order.paid", "order.shipped", "order.cancelled", "order.bad", "order.note"}

// postponeRetryHandler: order.created creates the order; order.paid and
// order.shipped postpone until it exists; the other types need nothing.
// Each apply is recorded in pretry.applied, in commit order.
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
	case "order.paid", "order.shipped":
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pretry.orders WHERE key = $1)`, b.Key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return consumer.Postpone(fmt.Errorf("%s %s needs order.created", b.Key, ev.Type))
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
// until the test ends or stop is called. The backoff is an hour, so a
// postponed event applies only when it is retried after a later one.
func runPretry(t *testing.T, db *hookbridgetest.Database, ns *hookbridgetest.JetStream, h consumer.Handler, batch int) (stop func()) {
	t.Helper()
	c, err := engine.New(db.Pool, ns.JS, engine.Options{
		Name: "pretry", EventTypes: postponeRetryTypes, Handler: h, Partitions: stream.DefaultPartitions, BatchSize: batch,
		MaxDeliver: 5, Backoff: []time.Duration{time.Hour}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
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
