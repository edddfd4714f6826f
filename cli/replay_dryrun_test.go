package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// A dry run says what the real run will do: it counts no "processed"
// (nothing is applied), it names the event ids whole, and a dead-lettered
// event, which the inbox alone calls new, is shown as the dead letter it
// is, with what the real run does: apply it again, and fail again. The
// real run then does what it said.
func TestReplayDryRunSaysWhatTheRealRunWillDo(t *testing.T) {
	t.Parallel()
	db, ns, flags := opsEnv(t)
	const longID = "msg_c95412d155eb49e1a0b3f2e4d5c6a7b8"
	ns.PublishHook(t, "demo", longID, orders.Created, orders.WebhookBody(orders.Created, "o-long", 100))
	// Paid before it was created: the handler refuses it every time.
	seq := ns.PublishHook(t, "demo", "pay-orphan", orders.Paid, orders.WebhookBody(orders.Paid, "o-none", 100))
	err := engine.RecordDeadLetter(context.Background(), db.Pool, engine.DeadLetter{Consumer: "orders", Source: "demo",
		EventID: "pay-orphan", EventType: orders.Paid, StreamSeq: seq, Deliveries: 10, Reason: engine.ReasonMaxDeliver, LastError: "unknown order o-none"})
	if err != nil {
		t.Fatal(err)
	}
	var dlID int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT id FROM hookbridge.dead_letters`).Scan(&dlID); err != nil {
		t.Fatal(err)
	}

	out, err := runOps(t, append([]string{"replay", "--consumer", "orders", "--dry-run"}, flags...)...)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, want := range []string{" " + longID + " ", fmt.Sprintf("dead letter %d (max_deliver after 10 deliveries: unknown order o-none): the real run applies it again", dlID),
		"1 of the new are dead letters"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if !regexpLine(out, `^new\s+2$`) || regexpLine(out, `^processed`) {
		t.Errorf("dry run summary: want new 2 and no processed row:\n%s", out)
	}

	out, err = runOps(t, append([]string{"replay", "--consumer", "orders", "--dry-run", "--json"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var item ops.ReplayItem
	if err := json.Unmarshal([]byte(lines[1]), &item); err != nil || item.EventID != "pay-orphan" || item.DryRunNote == nil || item.DeadLetterID != dlID || item.Note == "" {
		t.Fatalf("dry run json line %s (%v)", lines[1], err)
	}

	out, err = runOps(t, append([]string{"replay", "--consumer", "orders"}, flags...)...)
	if err == nil || !regexpLine(out, `^failed\s+1$`) || !regexpLine(out, `^processed\s+1$`) {
		t.Fatalf("real run: %v, want 1 processed and 1 failed as the dry run said\n%s", err, out)
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.dead_letters WHERE resolved_at IS NULL`); n != 1 {
		t.Fatalf("unresolved dead letters = %d, want the one that failed again", n)
	}
}

// A command line that lacks a required flag gets one line: what is
// missing, and where the flags are listed; not the whole help.
func TestMissingFlagPrintsOneLine(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	rt := &runtime{handlers: builtin.Handlers(), stdout: &stdout, stderr: &stderr, env: noEnv}
	exited := -1
	code := run(context.Background(), []string{"replay", "--dry-run"}, rt, func(code int) { exited = code })
	want := "hookbridge: error: missing flags: --consumer=STRING (see hookbridge replay --help)\n"
	if code != 2 || exited != 2 || stdout.Len() != 0 || stderr.String() != want {
		t.Fatalf("exit %d (exit called with %d)\nstdout:\n%s\nstderr:\n%q\nwant %q", code, exited, stdout.String(), stderr.String(), want)
	}
}
