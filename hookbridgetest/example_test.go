package hookbridgetest_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/schema"
)

// A GitHub delivery, signed as GitHub signs it; the event type and id
// travel in GitHub's own headers.
func ExampleNewSignedRequest() {
	req, err := hookbridgetest.NewSignedRequest(context.Background(), "http://127.0.0.1:8080/webhooks/gh", hookbridgetest.Delivery{
		Scheme: verify.SchemeGitHub,
		Secret: "It's a Secret to Everybody",
		Time:   time.Unix(1700000000, 0),
		Body:   []byte("Hello, World!"),
		Header: map[string][]string{"X-Github-Event": {"issues"}, "X-Github-Delivery": {"d-1"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(req.Method, req.URL.Path)
	fmt.Println(req.Header.Get("X-Hub-Signature-256"))
	// Output:
	// POST /webhooks/gh
	// sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17
}

// A handler applied through the consumer's real apply path, in an Example
// (hookbridgetest.Example gives it the testing.TB a test would have): the
// first delivery is processed, an exact repeat is a duplicate, and the
// same id with another body is a conflict; neither runs the handler.
func ExampleDatabase_Apply() {
	hookbridgetest.Example(func(t testing.TB) {
		tickets := schema.Set{Name: "kit_tickets", FS: fstest.MapFS{
			"0001_tickets.sql": {Data: []byte(`CREATE SCHEMA kit; CREATE TABLE kit.tickets (id text PRIMARY KEY, title text NOT NULL);`)},
		}}
		db := hookbridgetest.Postgres(t, tickets)
		h := consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO kit.tickets (id, title) VALUES ($1, $2)`, ev.ID, string(ev.Body))
			return err
		})
		results := db.Apply(t, h,
			hookbridgetest.NewEvent("gh", "evt-1", "issues.opened", []byte("login fails")),
			hookbridgetest.NewEvent("gh", "evt-1", "issues.opened", []byte("login fails")),
			hookbridgetest.NewEvent("gh", "evt-1", "issues.opened", []byte("another body")))
		fmt.Println(hookbridgetest.Outcomes(results))
		fmt.Println(db.Count(t, `SELECT count(*) FROM kit.tickets`), "ticket")
	})
	// Output:
	// [processed duplicate conflict]
	// 1 ticket
}
