package engine_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// TestConflictRecorderDecodesEventType: the ingress percent-encodes a
// type that a NATS header would not carry unchanged; the recorded
// conflict has the provider's spelling, as the inbox does, except a type
// Postgres text cannot hold, which keeps its encoded spelling.
func TestConflictRecorderDecodesEventType(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	ns.EnsureHooks(t)
	cases := map[string]struct{ typ, want string }{
		"tab":     {"deploy:\tstaging", "deploy:\tstaging"},
		"spaces":  {" orders/create ", " orders/create "},
		"plain":   {"orders/create", "orders/create"},
		"invalid": {"bad\xff", "bad%FF"},
	}
	for id, c := range cases {
		msg := nats.NewMsg(stream.ConflictSubject("demo"))
		msg.Data = []byte(`{"changed":true}`)
		msg.Header.Set(stream.HeaderSource, "demo")
		msg.Header.Set(stream.HeaderEventID, id)
		v, encoded := stream.TypeHeader(c.typ)
		msg.Header.Set(stream.HeaderEventType, v)
		if encoded {
			msg.Header.Set(stream.HeaderEventTypeEncoding, stream.TypeEncodingPercent)
		}
		msg.Header.Set(stream.HeaderOriginalSHA256, "00")
		msg.Header.Set(stream.HeaderOriginalSeq, "1")
		if _, err := ns.JS.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	rec := engine.NewConflictRecorder(db.Pool, ns.JS, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("recorder run: %v", err)
		}
	})
	hookbridgetest.Eventually(t, time.Minute, "every conflict recorded", func() bool {
		return db.Count(t, "SELECT count(*) FROM hookbridge.conflicts") == len(cases)
	})
	for id, c := range cases {
		var got string
		if err := db.Pool.QueryRow(context.Background(),
			"SELECT event_type FROM hookbridge.conflicts WHERE event_id = $1", id).Scan(&got); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got != c.want {
			t.Errorf("%s: event_type = %q, want %q", id, got, c.want)
		}
	}
}
