package hookbridgetest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/publisher"
	"github.com/hookbridge/hookbridge/schema"
)

// A team's migration set, as a handler ships it.
var ticketsSet = schema.Set{Name: "kit_tickets", FS: fstest.MapFS{
	"0001_tickets.sql": {Data: []byte(`CREATE SCHEMA kit; CREATE TABLE kit.tickets (id text PRIMARY KEY, title text NOT NULL);`)},
}}

// ticketHandler records a ticket and announces it; a title "boom" fails
// after the write, so the test can see the rollback.
func ticketHandler(consumerName string) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
		title := string(ev.Body)
		if _, err := tx.Exec(ctx, `INSERT INTO kit.tickets (id, title) VALUES ($1, $2)`, ev.ID, title); err != nil {
			return err
		}
		if title == "boom" {
			return errors.New("boom after the write")
		}
		return publisher.Enqueue(ctx, tx, publisher.Message{
			ID: consumerName + ":" + ev.Source + ":" + ev.ID, Subject: "events.kit.ticket_opened", Payload: ev.Body,
		})
	})
}

// Apply drives the real apply path: a new event is processed once, an
// exact repeat is a duplicate, the same id with another body a conflict,
// and a failing handler keeps neither its write nor the inbox row. The
// counters are read back from the database.
func TestApplyGivesTheConsumersOutcomes(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, ticketsSet)
	h := ticketHandler(hookbridgetest.DefaultConsumer)
	first := hookbridgetest.NewEvent("gh", "evt-1", "issues.opened", []byte("login fails"))

	got := db.Apply(t, h, first,
		hookbridgetest.NewEvent("gh", "evt-1", "issues.opened", []byte("login fails")),
		hookbridgetest.NewEvent("gh", "evt-1", "issues.opened", []byte("another body")),
		hookbridgetest.NewEvent("gh", "evt-2", "issues.opened", []byte("boom")))
	want := []consumer.Outcome{consumer.Processed, consumer.Duplicate, consumer.Conflict, consumer.Failed}
	if fmt.Sprint(hookbridgetest.Outcomes(got)) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v (errors: %v)", hookbridgetest.Outcomes(got), want, got)
	}
	if got[3].Err == nil || !strings.Contains(got[3].Err.Error(), "boom after the write") {
		t.Fatalf("failed event's error = %v", got[3].Err)
	}
	for q, n := range map[string]int{
		"SELECT count(*) FROM kit.tickets":          1,
		"SELECT count(*) FROM hookbridge.inbox":     1,
		"SELECT count(*) FROM hookbridge.conflicts": 1,
	} {
		if c := db.Count(t, q); c != n {
			t.Errorf("%s = %d, want %d", q, c, n)
		}
	}
	db.RequireOutbox(t, hookbridgetest.WantOutbox{ID: "hookbridgetest:gh:evt-1", Subject: "events.kit.ticket_opened", Payload: []byte("login fails")})

	// The same event applied again, alone (the per-event path), is a
	// duplicate under the same consumer and new under another.
	if out := hookbridgetest.Outcomes(db.Apply(t, h, first)); out[0] != consumer.Duplicate {
		t.Fatalf("repeat alone: %v, want duplicate", out)
	}
	if out := hookbridgetest.Outcomes(db.ApplyAs(t, "other", ticketHandler("other"), hookbridgetest.NewEvent("gh", "evt-9", "issues.opened", []byte("x")))); out[0] != consumer.Processed {
		t.Fatalf("other consumer: %v, want processed", out)
	}
	if rows := db.Outbox(t, "other:"); len(rows) != 1 || rows[0].Status != "pending" {
		t.Fatalf("other consumer's outbox rows: %+v", rows)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and
// stops the goroutine, so a test can check that an assertion fails.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func failureOf(t testing.TB, fn func(tb testing.TB)) string {
	rec := &fatalRecorder{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { fn(rec) })
	wg.Wait()
	return rec.msg
}

// RequireOutbox fails on a missing row, an extra row, and another
// payload; it passes on exactly the rows.
func TestRequireOutboxCatchesEachDifference(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t, ticketsSet)
	h := ticketHandler("c")
	db.ApplyAs(t, "c", h, hookbridgetest.NewEvent("gh", "a", "t", []byte("A")), hookbridgetest.NewEvent("gh", "b", "t", []byte("B")))
	a := hookbridgetest.WantOutbox{ID: "c:gh:a", Subject: "events.kit.ticket_opened", Payload: []byte("A")}
	b := hookbridgetest.WantOutbox{ID: "c:gh:b", Subject: "events.kit.ticket_opened"}
	if msg := failureOf(t, func(tb testing.TB) { db.RequireOutbox(tb, a, b) }); msg != "" {
		t.Fatalf("exact rows failed: %s", msg)
	}
	for name, want := range map[string][]hookbridgetest.WantOutbox{
		"extra":   {a},
		"missing": {a, b, {ID: "c:gh:c", Subject: "events.kit.ticket_opened"}},
		"payload": {a, {ID: b.ID, Subject: b.Subject, Payload: []byte("not B")}},
		"order":   {b, a},
	} {
		if msg := failureOf(t, func(tb testing.TB) { db.RequireOutbox(tb, want...) }); msg == "" {
			t.Errorf("%s: RequireOutbox passed", name)
		}
	}
}

// Every scheme's signed request passes that scheme's verifier over the
// request's own body, and fails another secret's.
func TestSignedRequestVerifiesForEveryScheme(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"order.created","id":"evt-1"}`)
	now := time.Now()
	for _, scheme := range verify.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			secret, opts := "s3cret", verify.Options{}
			switch scheme {
			case verify.SchemeStandardWebhooks:
				secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
			case verify.SchemeHMAC:
				opts.HMAC = verify.HMACConfig{Header: "X-Sig", Prefix: "sha256=", TimestampHeader: "X-Ts"}
			}
			req := hookbridgetest.SignedRequest(t, "http://127.0.0.1/webhooks/x", hookbridgetest.Delivery{
				Scheme: scheme, Secret: secret, ID: "evt-1", Time: now, Body: body, HMAC: opts.HMAC,
				Header: map[string][]string{"X-Event-Type": {"order.created"}},
			})
			got, err := io.ReadAll(req.Body)
			if err != nil {
				t.Fatal(err)
			}
			if req.Method != "POST" || string(got) != string(body) || req.Header.Get("Content-Type") != "application/json" || req.Header.Get("X-Event-Type") != "order.created" {
				t.Fatalf("request %s %v body %q", req.Method, req.Header, got)
			}
			v, err := verify.New(scheme, []string{secret}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Verify(req.Header, got, now); err != nil {
				t.Fatalf("signed request %v does not verify: %v", req.Header, err)
			}
			other, err := verify.New(scheme, []string{strings.Replace(secret, "s", "t", 1)}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if other.Verify(req.Header, got, now) == nil {
				t.Fatal("another secret verified")
			}
		})
	}
	if _, err := hookbridgetest.NewSignedRequest(context.Background(), "http://x", hookbridgetest.Delivery{Scheme: "nope", Secret: "s"}); err == nil {
		t.Fatal("unknown scheme signed")
	}
}

// captureStdout returns what fn printed to os.Stdout. It swaps the
// process's stdout, so its callers do not run in parallel.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	fn()
	os.Stdout = stdout
	w.Close()
	return <-out
}

// Example's t reports a failure on standard output, where the Example's
// output is compared, stops the body at Fatal like a test, and runs the
// cleanups last first once the body ends, with t.Context cancelled.
func TestExampleReportsFailuresAndCleansUp(t *testing.T) {
	var steps []string
	var ctxErr error
	out := captureStdout(t, func() {
		hookbridgetest.Example(func(t testing.TB) {
			t.Cleanup(func() { steps = append(steps, "first registered"); ctxErr = t.Context().Err() })
			t.Cleanup(func() { steps = append(steps, "second registered") })
			fmt.Println("before")
			t.Errorf("an error %d", 1)
			t.Fatal("a fatal")
			fmt.Println("not printed")
		})
	})
	if want := "before\nFAIL: an error 1\nFAIL: a fatal\n"; out != want {
		t.Errorf("printed %q, want %q", out, want)
	}
	if got := strings.Join(steps, ", "); got != "second registered, first registered" {
		t.Errorf("cleanups ran: %s", got)
	}
	if !errors.Is(ctxErr, context.Canceled) {
		t.Errorf("t.Context() in a cleanup: %v, want cancelled", ctxErr)
	}
	var dir string
	out = captureStdout(t, func() {
		hookbridgetest.Example(func(t testing.TB) {
			dir = t.TempDir()
			fmt.Println(t.Failed())
		})
	})
	if out != "false\n" {
		t.Errorf("a passing body printed %q", out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("TempDir %s is still there: %v", dir, err)
	}
}
