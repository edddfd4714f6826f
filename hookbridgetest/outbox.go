package hookbridgetest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/internal/store"
)

// OutboxRow is one row of hookbridge.outbox: an event a handler enqueued.
type OutboxRow struct {
	ID          string // the stable event id (Nats-Msg-Id when relayed)
	Subject     string
	Payload     []byte
	Headers     string // JSON object; "{}" when none
	OrderingKey string // "" when none
	Status      string // pending, sent or dead
}

// Outbox returns the outbox rows whose event id starts with prefix (""
// for all), in the order they were enqueued.
func (d *Database) Outbox(t testing.TB, prefix string) []OutboxRow {
	t.Helper()
	rows, err := store.OutboxList(context.Background(), d.Pool, prefix)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	out := make([]OutboxRow, len(rows))
	for i, r := range rows {
		out[i] = OutboxRow{ID: r.EventID, Subject: r.Subject, Payload: r.Payload, Headers: r.Headers, OrderingKey: r.OrderingKey, Status: r.Status}
	}
	return out
}

// WantOutbox is an outbox row a test expects. Payload nil means any
// payload.
type WantOutbox struct {
	ID      string
	Subject string
	Payload []byte
}

// RequireOutbox fails the test unless the outbox holds exactly want (by
// id, subject and, when given, payload), in that order: an event enqueued
// twice, one missing or one extra are all failures.
func (d *Database) RequireOutbox(t testing.TB, want ...WantOutbox) {
	t.Helper()
	got := d.Outbox(t, "")
	var problems []string
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			problems = append(problems, fmt.Sprintf("missing #%d %s %s", i, want[i].ID, want[i].Subject))
		case i >= len(want):
			problems = append(problems, fmt.Sprintf("unexpected #%d %s %s", i, got[i].ID, got[i].Subject))
		case got[i].ID != want[i].ID || got[i].Subject != want[i].Subject:
			problems = append(problems, fmt.Sprintf("#%d is %s %s, want %s %s", i, got[i].ID, got[i].Subject, want[i].ID, want[i].Subject))
		case want[i].Payload != nil && !bytes.Equal(got[i].Payload, want[i].Payload):
			problems = append(problems, fmt.Sprintf("#%d %s payload %q, want %q", i, got[i].ID, got[i].Payload, want[i].Payload))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("outbox (%d rows, want %d):\n  %s", len(got), len(want), strings.Join(problems, "\n  "))
	}
}
