package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
)

// StatusCmd prints how far behind everything is.
type StatusCmd struct {
	JSON bool `help:"Print JSON."`
	natsFlags
}

// Status is the operator's overview.
type Status struct {
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
	Outbox    OutboxStatus     `json:"outbox"`
	// DeadLetters counts unresolved dead letters per consumer.
	DeadLetters map[string]int64 `json:"dead_letters_unresolved"`
	Conflicts   int64            `json:"conflicts"`
	// JetStreamError says why streams and consumers are missing.
	JetStreamError string `json:"jetstream_error,omitempty"`
}

// StreamStatus is one stream. FirstTime is how far back a replay reaches:
// messages leave by max_age, and HOOKS is also trimmed below the lowest
// ack floor of its consumers when its space runs short.
type StreamStatus struct {
	Name      string    `json:"name"`
	Messages  uint64    `json:"messages"`
	Bytes     uint64    `json:"bytes"`
	FirstSeq  uint64    `json:"first_seq"`
	LastSeq   uint64    `json:"last_seq"`
	FirstTime time.Time `json:"first_time"`
	LastTime  time.Time `json:"last_time"`
	// MaxBytes is the byte limit (-1: none), MaxAgeSeconds the age limit.
	MaxBytes      int64   `json:"max_bytes"`
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	// Full says why the stream refuses its next message ("" while it has
	// room; a full server store shows only in the ingress's answers).
	Full string `json:"full,omitempty"`
	// LowestAckFloor (HOOKS) is the lowest ack floor of its consumers:
	// messages up to it are acked by all and would be trimmed first.
	LowestAckFloor *uint64 `json:"lowest_ack_floor,omitempty"`
}

// ConsumerStatus is one durable consumer.
type ConsumerStatus struct {
	Stream         string `json:"stream"`
	Name           string `json:"name"`
	NumPending     uint64 `json:"num_pending"`
	NumAckPending  int    `json:"num_ack_pending"`
	NumRedelivered int    `json:"num_redelivered"`
	// AckFloor is the stream sequence up to which every message is acked;
	// OldestUnackedSeconds the age of the first message after it (0: none).
	AckFloor             uint64  `json:"ack_floor"`
	OldestUnackedSeconds float64 `json:"oldest_unacked_seconds"`
}

// OutboxStatus summarises hookbridge.outbox.
type OutboxStatus struct {
	Pending             int64   `json:"pending"`
	Dead                int64   `json:"dead"`
	OldestPendingSecond float64 `json:"oldest_pending_seconds"`
}

// replayConsumerPrefix names the ephemeral consumers of running replays;
// they are not part of the deployment's state.
const replayConsumerPrefix = "hookbridge_replay_"

// Run implements the status command. Without a way to reach JetStream it
// still prints the Postgres part, then fails with the reason.
func (c *StatusCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	pool, err := opsPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	st := Status{Streams: []StreamStatus{}, Consumers: []ConsumerStatus{}} // [] rather than null in JSON
	if err := st.readPostgres(ctx, pool); err != nil {
		return fmt.Errorf("status: %w", dbError(err))
	}
	js, closeNATS, jsErr := opsJetStream(ctx, cfg, c.natsFlags)
	if jsErr == nil {
		jsErr = st.readJetStream(ctx, js)
		closeNATS()
	}
	if jsErr != nil {
		st.JetStreamError = jsErr.Error()
	}
	if c.JSON {
		err = writeJSON(rt.stdout, st)
	} else {
		err = st.print(rt.stdout)
	}
	if err != nil {
		return err
	}
	if jsErr != nil {
		return fmt.Errorf("status: streams and consumers not shown: %w", jsErr)
	}
	return nil
}

func (st *Status) readPostgres(ctx context.Context, pool *pgxpool.Pool) error {
	ob, err := publisher.OutboxStats(ctx, pool)
	if err != nil {
		return err
	}
	st.Outbox = OutboxStatus{Pending: ob.Pending, Dead: ob.Dead, OldestPendingSecond: ob.OldestPending.Seconds()}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM hookbridge.conflicts").Scan(&st.Conflicts); err != nil {
		return fmt.Errorf("count conflicts: %w", err)
	}
	rows, err := pool.Query(ctx, `
		SELECT consumer, count(*) FROM hookbridge.dead_letters
		WHERE resolved_at IS NULL GROUP BY consumer ORDER BY consumer`)
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	st.DeadLetters = map[string]int64{}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		st.DeadLetters[name] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("count dead letters: %w", err)
	}
	return nil
}

func (st *Status) readJetStream(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		ss := StreamStatus{
			Name: info.Config.Name, Messages: info.State.Msgs, Bytes: info.State.Bytes,
			FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq,
			FirstTime: info.State.FirstTime, LastTime: info.State.LastTime,
			MaxBytes: info.Config.MaxBytes, MaxAgeSeconds: info.Config.MaxAge.Seconds(),
		}
		if err := atLimit(info); err != nil {
			ss.Full = err.Error()
		}
		st.Streams = append(st.Streams, ss)
	}
	if err := streams.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return fmt.Errorf("list streams: %w", err)
	}
	for _, s := range st.Streams {
		if err := st.readConsumers(ctx, js, s.Name); err != nil {
			return err
		}
	}
	return nil
}

func (st *Status) readConsumers(ctx context.Context, js jetstream.JetStream, streamName string) error {
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("stream %s: %w", streamName, err)
	}
	list := s.ListConsumers(ctx)
	for ci := range list.Info() {
		if strings.HasPrefix(ci.Name, replayConsumerPrefix) {
			continue
		}
		cs := ConsumerStatus{
			Stream: streamName, Name: ci.Name, NumPending: ci.NumPending,
			NumAckPending: ci.NumAckPending, NumRedelivered: ci.NumRedelivered, AckFloor: ci.AckFloor.Stream,
		}
		if streamName == stream.Hooks && (ci.NumPending > 0 || ci.NumAckPending > 0) {
			if age, err := oldestUnacked(ctx, js, ci.AckFloor.Stream); err == nil {
				cs.OldestUnackedSeconds = age.Seconds()
			}
		}
		st.Consumers = append(st.Consumers, cs)
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return fmt.Errorf("list consumers of %s: %w", streamName, err)
	}
	if streamName == stream.Hooks {
		if floor, _, err := lowestAckFloor(ctx, s, nil); err == nil {
			for i := range st.Streams {
				if st.Streams[i].Name == stream.Hooks {
					st.Streams[i].LowestAckFloor = &floor
				}
			}
		}
	}
	return nil
}

func (st *Status) print(w io.Writer) error {
	if st.JetStreamError == "" {
		t := newTable(w, "STREAM", "MESSAGES", "BYTES", "LIMIT", "FIRST SEQ", "LAST SEQ", "FIRST (REPLAY REACHES BACK TO)", "LAST", "MAX AGE")
		for _, s := range st.Streams {
			limit := "none"
			if s.MaxBytes > 0 {
				limit = fmt.Sprintf("%d (%.0f%%)", s.MaxBytes, 100*float64(s.Bytes)/float64(s.MaxBytes))
			}
			first := fmtTime(s.FirstTime)
			if !s.FirstTime.IsZero() {
				first += " (" + time.Since(s.FirstTime).Round(time.Second).String() + " ago)"
			}
			t.row(s.Name, fmt.Sprint(s.Messages), fmt.Sprint(s.Bytes), limit, fmt.Sprint(s.FirstSeq), fmt.Sprint(s.LastSeq),
				first, fmtTime(s.LastTime), time.Duration(s.MaxAgeSeconds*float64(time.Second)).String())
		}
		if err := t.flush(); err != nil {
			return err
		}
		for _, s := range st.Streams {
			if s.Full != "" {
				fmt.Fprintf(w, "%s REFUSES NEW MESSAGES: %s\n", s.Name, s.Full)
			}
			if s.LowestAckFloor != nil {
				fmt.Fprintf(w, "%s: every consumer has acked up to seq %d; when space runs short, serve trims below it and replays then reach back to seq %d\n",
					s.Name, *s.LowestAckFloor, max(*s.LowestAckFloor+1, s.FirstSeq))
			}
		}
		fmt.Fprintln(w)
		t = newTable(w, "STREAM", "CONSUMER", "PENDING", "ACK PENDING", "REDELIVERED", "ACK FLOOR", "OLDEST UNACKED", "DEAD LETTERS")
		for _, c := range st.Consumers {
			oldest := "-"
			if c.OldestUnackedSeconds > 0 {
				oldest = time.Duration(c.OldestUnackedSeconds * float64(time.Second)).Round(time.Second).String()
			}
			t.row(c.Stream, c.Name, fmt.Sprint(c.NumPending), fmt.Sprint(c.NumAckPending), fmt.Sprint(c.NumRedelivered),
				fmt.Sprint(c.AckFloor), oldest, fmt.Sprint(st.DeadLetters[c.Name]))
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	t := newTable(w, "POSTGRES", "COUNT")
	t.row("outbox pending", fmt.Sprint(st.Outbox.Pending))
	t.row("outbox oldest pending", time.Duration(st.Outbox.OldestPendingSecond*float64(time.Second)).Round(time.Millisecond).String())
	t.row("outbox dead", fmt.Sprint(st.Outbox.Dead))
	var dead int64
	for _, n := range st.DeadLetters {
		dead += n
	}
	t.row("dead letters unresolved", fmt.Sprint(dead))
	t.row("conflicts", fmt.Sprint(st.Conflicts))
	return t.flush()
}
