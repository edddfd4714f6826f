package publisher

import (
	"bytes"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Flush writes the messages gathered in a [Deferred] context.
type Flush func(ctx context.Context, tx pgx.Tx) error

type deferredKey struct{}

// gathered is what Enqueue and EnqueueBatch collected in a Deferred
// context: validated messages with their headers column, in order, each
// id once.
type gathered struct {
	msgs    []Message
	headers []*string
	index   map[string]int // id -> position in msgs
}

// Deferred returns a context in which [Enqueue] and [EnqueueBatch] gather
// messages instead of writing them, and the function that writes them,
// in the order they were enqueued, with the semantics of one EnqueueBatch
// call. Messages are validated when they are enqueued, and an id enqueued
// twice is a no-op with the same subject and payload and [ErrIDReused]
// with others, then too; a repeat of an id already in the outbox is
// answered when flush writes them. The caller must call flush in the same
// transaction before it commits. In a context that already gathers, it
// returns that context and a flush that does nothing: the outer flush
// writes everything.
//
// consumer.Mux gathers the messages of all the runs of a batch, so that
// a transaction's messages go into one pack, not one per run of a type.
func Deferred(ctx context.Context) (context.Context, Flush) {
	if _, ok := ctx.Value(deferredKey{}).(*gathered); ok {
		return ctx, func(context.Context, pgx.Tx) error { return nil }
	}
	g := &gathered{index: map[string]int{}}
	return context.WithValue(ctx, deferredKey{}, g), g.flush
}

// gathering returns ctx's gathered messages, nil when it does not gather.
func gathering(ctx context.Context) *gathered {
	g, _ := ctx.Value(deferredKey{}).(*gathered)
	return g
}

// add validates msgs and gathers them.
func (g *gathered) add(ctx context.Context, msgs []Message) error {
	for _, m := range msgs {
		if err := validate(m); err != nil {
			return err
		}
		if j, dup := g.index[m.ID]; dup {
			if g.msgs[j].Subject != m.Subject || !bytes.Equal(g.msgs[j].Payload, m.Payload) {
				return fmt.Errorf("enqueue outbox event %s: %w", m.ID, ErrIDReused)
			}
			continue
		}
		h, err := encodeHeaders(ctx, m.Header)
		if err != nil {
			return fmt.Errorf("enqueue outbox event %s: %w", m.ID, err)
		}
		g.index[m.ID] = len(g.msgs)
		g.msgs = append(g.msgs, m)
		g.headers = append(g.headers, h)
	}
	return nil
}

// flush writes the gathered messages and forgets them.
func (g *gathered) flush(ctx context.Context, tx pgx.Tx) error {
	if len(g.msgs) == 0 {
		return nil
	}
	w := &writes{}
	for i, m := range g.msgs {
		w.add(m, g.headers[i])
	}
	msgs := g.msgs
	g.msgs, g.headers, g.index = nil, nil, map[string]int{}
	return write(ctx, tx, w, msgs)
}
