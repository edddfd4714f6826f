// Package selftest is hookbridge's acceptance protocol as a built-in run
// against a live deployment: a handler of its own, which writes only to
// the hookbridge_selftest schema and enqueues only to
// events.hookbridge_selftest.*, and the checks that the selftest command
// runs through it (run.go). serve adds its source and consumer when the
// configuration says selftest: {enabled: true}; real business tables are
// never touched.
package selftest

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/internal/stream"
	"github.com/hookbridge/hookbridge/publisher"
	"github.com/hookbridge/hookbridge/schema"
)

// Names of the self-test's parts: its source (the URL path segment), its
// consumer and handler, the one event type it sends, and the root of the
// subjects its outgoing events take.
const (
	Source      = "hookbridge_selftest"
	Consumer    = "hookbridge_selftest"
	HandlerName = "hookbridge_selftest"
	EventType   = "hookbridge_selftest.probe"
	SubjectRoot = stream.EventsRoot + ".hookbridge_selftest"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations is the self-test's schema (set "hookbridge_selftest").
func Migrations() schema.Set {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // fixed at build time
	}
	return schema.Set{Name: "hookbridge_selftest", FS: sub}
}

// Probe is the body of a self-test event. Run and Check name it (and its
// outgoing event's subject); the flags ask the handler to fail on purpose.
type Probe struct {
	Type  string `json:"type"`
	Run   string `json:"run"`
	Check string `json:"check"`
	// Payload makes bodies of one check differ (the conflict check).
	Payload string `json:"payload,omitempty"`
	// FailBeforeCommit fails the first delivery after both writes: the
	// rollback must take both, and the redelivery apply once.
	FailBeforeCommit bool `json:"fail_before_commit,omitempty"`
	// FailBetweenWrites fails every delivery after the business write
	// and before the outbox write, permanently: neither may be kept, and
	// the event goes to the dead letters.
	FailBetweenWrites bool `json:"fail_between_writes,omitempty"`
}

// Faults a handler can be told to plant, for testing the self-test
// itself: each breaks a guarantee, so a run against it must fail.
const (
	// FaultNone is the real handler.
	FaultNone = ""
	// FaultSkipInbox writes the effect on a connection of its own, outside
	// the inbox transaction: a rollback no longer takes it.
	FaultSkipInbox = "skip-inbox"
	// FaultDoubleApply writes every effect twice.
	FaultDoubleApply = "double-apply"
)

// Options configure the handler.
type Options struct {
	// Fault plants a fault (Fault*); empty for the real handler. Only
	// hookbridge's own tests of the self-test set it.
	Fault string
}

// NewHandler is the self-test's handler for consumerName. It applies a
// probe as a team's handler applies an event: one row in
// hookbridge_selftest.effects and one outgoing event, both in the
// transaction hookbridge gives it.
func NewHandler(consumerName string, o Options) (consumer.Handler, error) {
	switch o.Fault {
	case FaultNone, FaultSkipInbox, FaultDoubleApply:
	default:
		return nil, fmt.Errorf("selftest: unknown fault %q", o.Fault)
	}
	return &handler{consumer: consumerName, fault: o.Fault}, nil
}

type handler struct {
	consumer string
	fault    string
}

// errInjected marks the failures the handler makes on purpose.
var errInjected = errors.New("selftest: injected failure")

const insertEffect = `INSERT INTO hookbridge_selftest.effects (run_id, check_name, event_id, body_sha256, delivery) VALUES ($1, $2, $3, $4, $5)`

func (h *handler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var p Probe
	if err := json.Unmarshal(ev.Body, &p); err != nil {
		return consumer.Permanent(fmt.Errorf("selftest: body: %w", err))
	}
	// Run and check become subject tokens of the outgoing event.
	if !stream.ValidName(p.Run) || !stream.ValidName(p.Check) {
		return consumer.Permanent(errors.New("selftest: run and check must be letters, digits, '-' or '_'"))
	}
	sum := sha256.Sum256(ev.Body)
	args := []any{p.Run, p.Check, ev.ID, sum[:], int(ev.NumDelivered)}
	if err := h.writeEffect(ctx, tx, args); err != nil {
		return err
	}
	if p.FailBetweenWrites {
		return consumer.Permanent(fmt.Errorf("%w between the business write and the outbox write", errInjected))
	}
	err := publisher.Enqueue(ctx, tx, publisher.Message{
		ID:      OutboxID(ev.ID),
		Subject: Subject(p.Run, p.Check),
		Payload: ev.Body,
	})
	if err != nil {
		return err
	}
	if p.FailBeforeCommit && ev.NumDelivered <= 1 {
		return fmt.Errorf("%w before commit (delivery %d)", errInjected, ev.NumDelivered)
	}
	return nil
}

// writeEffect writes the business row in tx, or where the planted fault
// says.
func (h *handler) writeEffect(ctx context.Context, tx pgx.Tx, args []any) error {
	switch h.fault {
	case FaultSkipInbox:
		conn, err := pgx.ConnectConfig(ctx, tx.Conn().Config().Copy())
		if err != nil {
			return fmt.Errorf("selftest: connect: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, insertEffect, args...)
		return err
	case FaultDoubleApply:
		if _, err := tx.Exec(ctx, insertEffect, args...); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, insertEffect, args...)
	return err
}

// OutboxID is the stable id of the outgoing event of the self-test event
// eventID: the same apply always yields the same id.
func OutboxID(eventID string) string { return Consumer + ":" + eventID }

// Subject is where the outgoing event of a run's check goes.
func Subject(run, check string) string { return SubjectRoot + "." + run + "." + check }
