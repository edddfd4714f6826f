package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// A full EVENTS stream (discard: new at its max_bytes) refuses the relay's
// publishes. That is the broker's condition, not the rows': they stay
// pending however many rounds it lasts, with the refusal as last_error,
// and are all published once there is room again. Before, every refusal
// counted toward MaxAttempts and the rows went dead.
func TestFullEventsStreamDoesNotKillRows(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ctx := context.Background()

	const rows = 12
	var msgs []publisher.Message
	for _, id := range ids("full", rows) {
		m := msg(id, "")
		m.Payload = []byte(strings.Repeat("p", 400))
		msgs = append(msgs, m)
	}
	enqueue(t, db.Pool, msgs...)

	opts := fastOpts()
	opts.MaxAttempts = 2
	opts.BackoffBase, opts.BackoffMax = time.Millisecond, 2*time.Millisecond
	opts.Stream = stream.Options{MaxBytes: 2048} // room for a few rows only
	r := relay.NewRelay(db.Pool, ns.JS, opts)

	for range 20 { // ten times MaxAttempts
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stored := ns.StreamMsgs(t, stream.Events)
	if stored == 0 || stored >= rows {
		t.Fatalf("EVENTS holds %d of %d rows; the test needs it full part-way", stored, rows)
	}
	st, err := relay.OutboxStats(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 || st.Pending != rows-int64(stored) {
		t.Fatalf("stats with EVENTS full = %+v, want 0 dead and %d pending", st, rows-int64(stored))
	}
	refused := 0
	for _, id := range ids("full", rows) {
		s := row(t, db, id)
		if s.status != "pending" {
			continue
		}
		refused++
		if s.attempts != 0 || s.lastError == nil || !strings.Contains(*s.lastError, "maximum bytes") {
			t.Fatalf("refused row %s = %+v (last_error %q), want 0 attempts and the refusal", id, s, deref(s.lastError))
		}
	}
	if refused == 0 {
		t.Fatal("no row was refused")
	}

	// Room again (the limit raised): every row is published, none twice.
	cfg := stream.EventsConfig(stream.Options{MaxBytes: 1 << 20})
	if _, err := ns.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := relay.OutboxStats(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending == 0 && st.Dead == 0 {
			break
		}
		if i > 200 {
			for _, id := range ids("full", rows) {
				s := row(t, db, id)
				t.Logf("%s %+v %q", id, s, deref(s.lastError))
			}
			t.Logf("EVENTS holds %d", ns.StreamMsgs(t, stream.Events))
			t.Fatalf("rows not published once there is room: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := ns.StreamMsgs(t, stream.Events); got != rows {
		t.Fatalf("EVENTS holds %d once there is room, want all %d rows once", got, rows)
	}
}
