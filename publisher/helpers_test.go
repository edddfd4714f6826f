package publisher_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/publisher"
)

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
