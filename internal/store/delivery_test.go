package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/store"
)

// A lease is held by one instance until it runs out; a write made under
// it checks it, and one made after another instance took it over writes
// nothing.
func TestDeliveryLeaseFencesWrites(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	if err := store.DeliveryEndpointEnsure(ctx, db.Pool, []string{"e1", "e2"}); err != nil {
		t.Fatal(err)
	}
	got, err := store.DeliveryEndpointLease(ctx, db.Pool, "a", []string{"e1", "e2"}, time.Minute)
	if err != nil || len(got) != 2 {
		t.Fatalf("a's lease: %v %v", got, err)
	}
	if got, _ := store.DeliveryEndpointLease(ctx, db.Pool, "b", []string{"e1"}, time.Minute); len(got) != 0 {
		t.Fatalf("b took e1 from a while a's lease runs: %v", got)
	}
	p := store.DeliveryPending{Endpoint: "e1", StreamSeq: 7, EventID: "ev7", Subject: "events.x", Attempts: 1}
	if ok, err := store.DeliveryPendingFail(ctx, db.Pool, "b", p, time.Second); err != nil || ok {
		t.Fatalf("b wrote without the lease: %v %v", ok, err)
	}
	if ok, err := store.DeliveryPendingFail(ctx, db.Pool, "a", p, time.Second); err != nil || !ok {
		t.Fatalf("a could not write under its lease: %v %v", ok, err)
	}
	// a's lease runs out; b takes it; a writes nothing more.
	if _, err := db.Pool.Exec(ctx, "UPDATE hookbridge.delivery_endpoints SET lease_until = now() - interval '1s'"); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.DeliveryEndpointLease(ctx, db.Pool, "b", []string{"e1"}, time.Minute); len(got) != 1 {
		t.Fatalf("b could not take an expired lease: %v", got)
	}
	p.Attempts = 2
	if ok, _ := store.DeliveryPendingFail(ctx, db.Pool, "a", p, time.Second); ok {
		t.Fatal("a wrote after b took the lease over")
	}
	if held, _, _ := store.DeliveryPendingPark(ctx, db.Pool, "e1", "a", []store.DeliveryPending{{StreamSeq: 9, EventID: "ev9", Subject: "s"}}); held {
		t.Fatal("a parked after b took the lease over")
	}
	got2, ok, err := store.DeliveryPendingGet(ctx, db.Pool, "e1", 7)
	if err != nil || !ok || got2.Attempts != 1 {
		t.Fatalf("row %+v %v %v, want a's one failed attempt", got2, ok, err)
	}
	if err := store.DeliveryEndpointRelease(ctx, db.Pool, "b", []string{"e1"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.DeliveryEndpointLease(ctx, db.Pool, "a", []string{"e1"}, time.Minute); len(got) != 1 {
		t.Fatalf("a could not take a released lease: %v", got)
	}
}

// On an ordered endpoint a key's rows are due one at a time: the first
// parked row of a key with none becomes due, the others wait until the
// one before them is done.
func TestDeliveryPendingKeyOrder(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	must(t, store.DeliveryEndpointEnsure(ctx, db.Pool, []string{"e"}))
	if _, err := store.DeliveryEndpointLease(ctx, db.Pool, "a", []string{"e"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	held, n, err := store.DeliveryPendingPark(ctx, db.Pool, "e", "a", []store.DeliveryPending{
		{StreamSeq: 5, EventID: "k5", Subject: "s", OrderingKey: "k"},
		{StreamSeq: 3, EventID: "k3", Subject: "s", OrderingKey: "k"},
		{StreamSeq: 4, EventID: "j4", Subject: "s", OrderingKey: "j"},
	})
	if err != nil || !held || n != 3 {
		t.Fatalf("park: %v %d %v", held, n, err)
	}
	due, err := store.DeliveryPendingDue(ctx, db.Pool, "e", 10)
	if err != nil {
		t.Fatal(err)
	}
	if seqs := seqsOf(due); !slices.Equal(seqs, []uint64{3, 4}) && !slices.Equal(seqs, []uint64{4, 3}) {
		t.Fatalf("due %v, want each key's first (3 and 4)", seqs)
	}
	// k3 is done: k5 becomes due.
	more, err := store.DeliveryPendingDone(ctx, db.Pool, "e", 3, "k")
	if err != nil || !more {
		t.Fatalf("done k3: more %v %v", more, err)
	}
	head, dueIn, ok, err := store.DeliveryPendingHead(ctx, db.Pool, "e", "k")
	if err != nil || !ok || head.StreamSeq != 5 || head.NextAttemptAt == nil || dueIn != 0 {
		t.Fatalf("k's head %+v (due in %s) %v %v, want 5, due", head, dueIn, ok, err)
	}
	// A row parked behind k5 waits.
	if _, _, err := store.DeliveryPendingPark(ctx, db.Pool, "e", "a", []store.DeliveryPending{{StreamSeq: 8, EventID: "k8", Subject: "s", OrderingKey: "k"}}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := store.DeliveryPendingGet(ctx, db.Pool, "e", 8); p.NextAttemptAt != nil {
		t.Fatalf("k8 is due at %v while k5 waits", p.NextAttemptAt)
	}
	if more, _ := store.DeliveryPendingDone(ctx, db.Pool, "e", 5, "k"); !more {
		t.Fatal("k has k8 left")
	}
	if more, _ := store.DeliveryPendingDone(ctx, db.Pool, "e", 8, "k"); more {
		t.Fatal("k has nothing left")
	}
}

// A requeue marks the dead letter and queues it once, however often it
// is asked; on an ordered endpoint a dead letter passed by a later event
// of its key is requeued only out of order, and the pass of a requeued
// one reports it pending.
func TestDeliveryDeadLetterRequeueOnce(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	ids := make([]int64, 0, 2)
	for i, key := range []string{"", "k"} {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{Endpoint: "e", EventID: "ev", Subject: "s",
				StreamSeq: uint64(10 + i), Attempts: 3, LastStatus: 500, Payload: []byte(`{"a":1}`),
				Headers: map[string]string{"Content-Type": "application/json"}, OrderingKey: key})
			return tx.SendBatch(ctx, b).Close()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	dls, err := store.DeliveryDeadLetterFind(ctx, db.Pool, store.DeliveryDeadLetterFilter{Endpoint: "e"})
	if err != nil || len(dls) != 2 {
		t.Fatalf("find: %v %v", dls, err)
	}
	for _, d := range dls {
		ids = append(ids, d.ID)
	}
	body, hdr, ok, err := store.DeliveryDeadLetterBody(ctx, db.Pool, ids[0])
	if err != nil || !ok || string(body) != `{"a":1}` || hdr["Content-Type"] != "application/json" {
		t.Fatalf("body %q %v %v %v", body, hdr, ok, err)
	}
	// A later event of k passes its dead letter.
	if pending, more, err := store.DeliveryDeadLetterPass(ctx, db.Pool, "e", "k", 20); err != nil || pending || more {
		t.Fatalf("pass: pending %v, more %v, %v", pending, more, err)
	}
	got, err := store.DeliveryDeadLetterRequeue(ctx, db.Pool, ids, false)
	if err != nil || !slices.Equal(got, ids[:1]) {
		t.Fatalf("requeue without out of order: %v %v, want only %d", got, err, ids[0])
	}
	if again, _ := store.DeliveryDeadLetterRequeue(ctx, db.Pool, ids[:1], false); len(again) != 0 {
		t.Fatalf("a second requeue requeued %v", again)
	}
	if got, _ := store.DeliveryDeadLetterRequeue(ctx, db.Pool, ids[1:], true); len(got) != 1 {
		t.Fatal("out of order requeue refused")
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.delivery_pending WHERE origin = 'requeue' AND attempts = 0 AND next_attempt_at <= now()"); n != 2 {
		t.Fatalf("pending requeues = %d, want 2", n)
	}
	// Dead-lettered again: the row reopens with its body kept.
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		store.QueueDeliveryDeadLetterInsert(b, store.DeliveryDeadLetter{Endpoint: "e", EventID: "ev", Subject: "s", StreamSeq: 10, Attempts: 4})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	dls, _ = store.DeliveryDeadLetterFind(ctx, db.Pool, store.DeliveryDeadLetterFilter{IDs: ids[:1]})
	if len(dls) != 1 || dls[0].Attempts != 4 || !dls[0].HasPayload || dls[0].Requeues != 1 {
		t.Fatalf("reopened %+v", dls)
	}
	if got, _ := store.DeliveryDeadLetterDiscard(ctx, db.Pool, ids); !slices.Equal(got, ids[:1]) {
		t.Fatalf("discard %v, want the reopened one only", got)
	}
}

func seqsOf(ps []store.DeliveryPending) []uint64 {
	out := make([]uint64, len(ps))
	for i, p := range ps {
		out[i] = p.StreamSeq
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The recorder's batch is one statement: every attempt is a row, as
// DeliveryAttemptInsert writes one (no status is NULL, the latency in
// milliseconds), and an event's history reads them back.
func TestDeliveryAttemptsInsertWritesEveryRow(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ctx := context.Background()
	in := []store.DeliveryAttempt{
		{Endpoint: "e1", EventID: "ev1", Subject: "events.x", StreamSeq: 1, Attempt: 1, StatusCode: 204, Duration: 12 * time.Millisecond},
		{Endpoint: "e1", EventID: "ev2", Subject: "events.x", StreamSeq: 2, Attempt: 1, ErrorClass: "timeout", Duration: 3 * time.Second},
		{Endpoint: "e2", EventID: "ev1", Subject: "events.x", StreamSeq: 1, Attempt: 2, StatusCode: 503, Excerpt: "busy"},
	}
	if err := store.DeliveryAttemptsInsert(ctx, db.Pool, in); err != nil {
		t.Fatal(err)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_attempts`); n != len(in) {
		t.Fatalf("%d rows, want %d", n, len(in))
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.delivery_attempts WHERE status_code IS NULL AND error_class = 'timeout' AND duration_ms = 3000`); n != 1 {
		t.Fatalf("%d rows of the timed-out attempt, want 1", n)
	}
	got, err := store.DeliveryAttemptListForEvent(ctx, db.Pool, "", "ev1")
	if err != nil || len(got) != 2 {
		t.Fatalf("ev1's attempts: %+v, %v", got, err)
	}
	for _, a := range got {
		if a.Endpoint == "e2" && (a.StatusCode != 503 || a.Excerpt != "busy" || a.Attempt != 2) {
			t.Fatalf("e2's attempt read back as %+v", a)
		}
		if a.Endpoint == "e1" && (a.StatusCode != 204 || a.Duration != 12*time.Millisecond) {
			t.Fatalf("e1's attempt read back as %+v", a)
		}
	}
}
