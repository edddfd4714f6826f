package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// fastOpts are relay options with short delays for tests.
func fastOpts() relay.Options {
	return relay.Options{
		PollInterval:   200 * time.Millisecond,
		BackoffBase:    10 * time.Millisecond,
		BackoffMax:     100 * time.Millisecond,
		PublishTimeout: 5 * time.Second,
	}
}

// enqueue commits msgs in one transaction.
func enqueue(t testing.TB, pool *pgxpool.Pool, msgs ...publisher.Message) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return publisher.Enqueue(context.Background(), tx, msgs...)
	})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
}

func msg(id, key string) publisher.Message {
	return publisher.Message{ID: id, Subject: "events.test.created", Payload: []byte("payload of " + id), OrderingKey: key}
}

// runRelay runs r until the test ends and checks that Run returns nil.
func runRelay(t testing.TB, r *relay.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v on shutdown, want nil", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("Run did not return a minute after cancel")
		}
	})
}

// connect opens a client connection of its own to the test server.
func connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// streamMsg is one stored message of the EVENTS stream.
type streamMsg struct {
	seq     uint64
	id      string
	subject string
	data    string
	header  nats.Header
}

// eventsMsgs reads every message of the EVENTS stream in sequence order.
func eventsMsgs(t testing.TB, js jetstream.JetStream) []streamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []streamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("get msg %d: %v", seq, err)
		}
		out = append(out, streamMsg{seq: m.Sequence, id: m.Header.Get(jetstream.MsgIDHeader), subject: m.Subject, data: string(m.Data), header: m.Header})
	}
	return out
}

type rowState struct {
	status    string
	attempts  int
	lastError *string
	streamSeq *int64
	dueIn     time.Duration // next_attempt_at - now
}

func row(t testing.TB, db *hookbridgetest.Database, eventID string) rowState {
	t.Helper()
	var s rowState
	var dueMs float64
	err := db.Pool.QueryRow(context.Background(), `
		SELECT status, attempts, last_error, stream_seq,
		       extract(epoch FROM next_attempt_at - clock_timestamp()) * 1000
		FROM hookbridge.outbox WHERE event_id = $1`, eventID).
		Scan(&s.status, &s.attempts, &s.lastError, &s.streamSeq, &dueMs)
	if err != nil {
		t.Fatalf("read outbox row %s: %v", eventID, err)
	}
	s.dueIn = time.Duration(dueMs * float64(time.Millisecond))
	return s
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

// listened returns a channel that receives once r's LISTEN connection is
// up (and again after each reconnect, if the last one was read).
func listened(r *relay.Relay) <-chan struct{} {
	c := make(chan struct{}, 1)
	relay.SetListening(r, func() {
		select {
		case c <- struct{}{}:
		default:
		}
	})
	return c
}
