package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/publisher"
	"github.com/hookbridge/hookbridge/schema"
)

// A small test domain, independent of the demo orders: accounts that are
// opened and then charged, each change announced in the outbox. It comes
// in two implementations with the same effect, one event at a time
// (accountsHandler) and set-wise (accountsBatchHandler), and the events
// can ask to fail in every way a handler can, so tests can compare the
// consumer's paths with nothing else changing.

const (
	accountOpened  = "account.opened"
	accountCharged = "account.charged"
)

var accountTypes = []string{accountOpened, accountCharged}

func accountsMigrations() schema.Set {
	return schema.Set{Name: "accounts", FS: fstest.MapFS{"0001_accounts.sql": {Data: []byte(`
CREATE SCHEMA accounts;
CREATE TABLE accounts.accounts (
    account_id    text    PRIMARY KEY,
    balance       bigint  NOT NULL,
    opened_event  text    NOT NULL,
    last_event    text    NOT NULL,
    version       integer NOT NULL DEFAULT 1
);`)}}}
}

// accountBody is every account event's body. Fail makes the handler fail
// after its writes: "retry" (an ordinary error), "permanent", "panic" or
// "sql" (a statement error that aborts the transaction).
type accountBody struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	Fail    string `json:"fail,omitempty"`
	Nonce   int    `json:"nonce,omitempty"` // makes a conflicting body
}

var errNoAccount = errors.New("no such account")

func accountEvent(id, typ string, b accountBody, seq uint64) consumer.Event {
	body, err := json.Marshal(b)
	if err != nil {
		panic(err)
	}
	return consumer.Event{Source: "demo", ID: id, Type: typ, Body: body, BodySHA256: sha256.Sum256(body),
		StreamSeq: seq, NumDelivered: 1, Subject: "hooks.demo." + typ}
}

func decodeAccount(ev consumer.Event) (accountBody, error) {
	var b accountBody
	if err := json.Unmarshal(ev.Body, &b); err != nil || b.Account == "" {
		return b, consumer.Permanent(fmt.Errorf("decode %s: bad body", ev.ID))
	}
	return b, nil
}

// injected is the failure an event asks for, run inside tx.
func injected(ctx context.Context, tx pgx.Tx, ev consumer.Event, fail string) error {
	switch fail {
	case "":
		return nil
	case "retry":
		return fmt.Errorf("event %s: injected retryable failure", ev.ID)
	case "permanent":
		return consumer.Permanent(fmt.Errorf("event %s: injected permanent failure", ev.ID))
	case "panic":
		var m map[string]int
		m[ev.ID]++ // a nil-map write: the kind of bug that panics
		return nil
	case "sql":
		_, err := tx.Exec(ctx, "SELECT 1 / 0")
		return fmt.Errorf("event %s: %w", ev.ID, err)
	}
	return consumer.Permanent(fmt.Errorf("event %s: unknown failure %q", ev.ID, fail))
}

func accountMessage(ev consumer.Event, what string, b accountBody) publisher.Message {
	return publisher.Message{
		ID:          "accounts:" + ev.Source + ":" + ev.ID,
		Subject:     "events.accounts." + what,
		Payload:     fmt.Appendf(nil, `{"account":%q,"amount":%d}`, b.Account, b.Amount),
		OrderingKey: b.Account,
	}
}

// accountsHandler applies one event at a time, as handlers written before
// BatchHandler do.
func accountsHandler() *consumer.Mux {
	m := consumer.NewMux()
	m.RegisterFunc(accountOpened, func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		b, err := decodeAccount(ev)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO accounts.accounts (account_id, balance, opened_event, last_event) VALUES ($1, $2, $3, $3)
			ON CONFLICT DO NOTHING`, b.Account, b.Amount, ev.ID)
		if err != nil {
			return fmt.Errorf("open %s: %w", b.Account, err)
		}
		if tag.RowsAffected() == 1 {
			if err := publisher.Enqueue(ctx, tx, accountMessage(ev, "opened", b)); err != nil {
				return err
			}
		}
		return injected(ctx, tx, ev, b.Fail)
	})
	m.RegisterFunc(accountCharged, func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		b, err := decodeAccount(ev)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			UPDATE accounts.accounts SET balance = balance - $2, last_event = $3, version = version + 1
			WHERE account_id = $1`, b.Account, b.Amount, ev.ID)
		if err != nil {
			return fmt.Errorf("charge %s: %w", b.Account, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("charge %s: %w", b.Account, errNoAccount)
		}
		if err := publisher.Enqueue(ctx, tx, accountMessage(ev, "charged", b)); err != nil {
			return err
		}
		return injected(ctx, tx, ev, b.Fail)
	})
	return m
}

// accountsBatchHandler has the effect of accountsHandler, set-wise: a
// Mux of BatchHandlers, one statement per run of events plus one outbox
// statement.
func accountsBatchHandler() *consumer.Mux {
	m := consumer.NewMux()
	m.Register(accountOpened, openBatch{})
	m.Register(accountCharged, chargeBatch{})
	return m
}

// decodeRun decodes evs.
func decodeRun(evs []consumer.Event) ([]accountBody, error) {
	bodies := make([]accountBody, len(evs))
	for i, ev := range evs {
		b, err := decodeAccount(ev)
		if err != nil {
			return nil, err
		}
		bodies[i] = b
	}
	return bodies, nil
}

// injectFirst runs the failure the first event asking for one asks for,
// after the run's writes, as the per-event handler does after each event's:
// a set-wise handler may fail the whole call, and the consumer narrows
// down to the event.
func injectFirst(ctx context.Context, tx pgx.Tx, evs []consumer.Event, bodies []accountBody) error {
	for i, b := range bodies {
		if b.Fail != "" {
			return injected(ctx, tx, evs[i], b.Fail)
		}
	}
	return nil
}

type openBatch struct{}

func (openBatch) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	return openBatch{}.HandleBatch(ctx, tx, []consumer.Event{ev})
}

func (openBatch) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	bodies, err := decodeRun(evs)
	if err != nil {
		return err
	}
	ids, balances, events := make([]string, len(evs)), make([]int64, len(evs)), make([]string, len(evs))
	for i, b := range bodies {
		ids[i], balances[i], events[i] = b.Account, b.Amount, evs[i].ID
	}
	// The first event of an account opens it, as one by one.
	rows, err := tx.Query(ctx, `
		INSERT INTO accounts.accounts (account_id, balance, opened_event, last_event)
		SELECT a, b, e, e FROM unnest($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY AS u(a, b, e, ord)
		ORDER BY ord
		ON CONFLICT DO NOTHING
		RETURNING opened_event`, ids, balances, events)
	if err != nil {
		return fmt.Errorf("open %d accounts: %w", len(evs), err)
	}
	opened, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("open %d accounts: %w", len(evs), err)
	}
	won := make(map[string]bool, len(opened))
	for _, id := range opened {
		won[id] = true
	}
	var msgs []publisher.Message
	for i, ev := range evs {
		if won[ev.ID] {
			msgs = append(msgs, accountMessage(ev, "opened", bodies[i]))
		}
	}
	if err := publisher.EnqueueBatch(ctx, tx, msgs); err != nil {
		return err
	}
	return injectFirst(ctx, tx, evs, bodies)
}

type chargeBatch struct{}

func (chargeBatch) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	return chargeBatch{}.HandleBatch(ctx, tx, []consumer.Event{ev})
}

func (chargeBatch) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	bodies, err := decodeRun(evs)
	if err != nil {
		return err
	}
	// Several charges of one account in a run: one UPDATE per account
	// with their sum, count and last event, as one by one would leave it.
	type agg struct {
		sum   int64
		n     int
		last  string
		order int
	}
	per := map[string]*agg{}
	var accounts []string
	for i, b := range bodies {
		a := per[b.Account]
		if a == nil {
			a = &agg{order: len(accounts)}
			per[b.Account] = a
			accounts = append(accounts, b.Account)
		}
		a.sum += b.Amount
		a.n++
		a.last = evs[i].ID
	}
	sums, ns, lasts := make([]int64, len(accounts)), make([]int32, len(accounts)), make([]string, len(accounts))
	for i, acc := range accounts {
		sums[i], ns[i], lasts[i] = per[acc].sum, int32(per[acc].n), per[acc].last
	}
	rows, err := tx.Query(ctx, `
		UPDATE accounts.accounts a SET balance = balance - u.s, last_event = u.l, version = version + u.n
		FROM unnest($1::text[], $2::bigint[], $3::int[], $4::text[]) AS u(id, s, n, l)
		WHERE a.account_id = u.id
		RETURNING a.account_id`, accounts, sums, ns, lasts)
	if err != nil {
		return fmt.Errorf("charge %d accounts: %w", len(accounts), err)
	}
	updated, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("charge %d accounts: %w", len(accounts), err)
	}
	if len(updated) != len(accounts) {
		return fmt.Errorf("charge: %w", errNoAccount)
	}
	msgs := make([]publisher.Message, len(evs))
	for i, ev := range evs {
		msgs[i] = accountMessage(ev, "charged", bodies[i])
	}
	if err := publisher.EnqueueBatch(ctx, tx, msgs); err != nil {
		return err
	}
	return injectFirst(ctx, tx, evs, bodies)
}
