package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/store"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// pruneBatch bounds one DELETE so retention never holds long locks or
// writes a huge transaction.
const pruneBatch = 1000

// PruneInbox deletes, in batches, the inbox rows applied more than
// retention before both now and the oldest message HOOKS still holds, and
// returns how many it deleted and the cutoff it used.
//
// An inbox row is what makes a redelivery, a replay or a provider's
// resend of its event a duplicate. Age from now alone is not enough:
// HOOKS keeps a message past streams.max_age while a consumer's ack floor
// holds it (a paused or lagging consumer, a durable missing since the last
// start), and a `replay --from-seq 1` or a durable re-created with
// deliver-all would then apply it again after its row went. Measuring
// retention from HOOKS' first message instead keeps every row whose
// message can still be delivered, to any consumer: that message was stored
// at or after the first one, and applied after it was stored, so its row's
// applied_at is not before the first message's time, let alone retention
// (at least streams.max_age, days by default) before it. A provider's
// resend of the event still in HOOKS was stored at or after the first
// message too, so its row goes only if the resend came more than
// retention after the apply: past what retention promises anyway. Keyed
// messages (hookp.<p>.…) are in HOOKS too, so the first message covers
// them. The two clocks compared, Postgres's applied_at and the JetStream
// server's stored time, would have to be apart by more than retention to
// break this.
//
// An empty HOOKS holds nothing that could come back: the cutoff is
// retention before now, as it always was.
func PruneInbox(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, now time.Time, retention time.Duration) (int64, time.Time, error) {
	cutoff, err := InboxCutoff(ctx, js, now, retention)
	if err != nil {
		return 0, cutoff, err
	}
	var total int64
	for {
		n, err := store.InboxPrune(ctx, pool, cutoff, pruneBatch)
		if err != nil {
			return total, cutoff, fmt.Errorf("prune inbox: %w", err)
		}
		total += n
		if n < pruneBatch {
			return total, cutoff, nil
		}
	}
}

// InboxCutoff returns the applied_at before which inbox rows may be
// deleted: retention before now or before HOOKS' first message, whichever
// is earlier (see [PruneInbox]).
func InboxCutoff(ctx context.Context, js jetstream.JetStream, now time.Time, retention time.Duration) (time.Time, error) {
	s, err := js.Stream(ctx, stream.Hooks)
	if err != nil {
		// Without HOOKS' state nothing tells which rows are still needed:
		// prune nothing this round rather than by age alone.
		return time.Time{}, fmt.Errorf("prune inbox: read stream %s: %w", stream.Hooks, err)
	}
	oldest := now
	if st := s.CachedInfo().State; st.Msgs > 0 && !st.FirstTime.IsZero() && st.FirstTime.Before(oldest) {
		oldest = st.FirstTime
	}
	return oldest.Add(-retention), nil
}

// RunInboxRetention prunes the inbox every interval, keeping rows for
// retention past the oldest message HOOKS holds ([PruneInbox]), until ctx
// is cancelled.
func RunInboxRetention(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, retention, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, cutoff, err := PruneInbox(ctx, pool, js, time.Now(), retention)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("inbox retention failed; will retry", "err", errtext.ForLog(err))
		case n > 0:
			log.Info("inbox rows pruned", "rows", n, "older_than", retention, "applied_before", cutoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
