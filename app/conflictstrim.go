package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// conflictRecorder is the durable of the conflict recorder
// (engine.NewConflictRecorder) on HOOKS_CONFLICTS. It acks a conflict
// only once its row in hookbridge.conflicts is committed, so its ack
// floor is how far every conflict is recorded.
const conflictRecorder = "hookbridge_conflicts"

// trimConflicts deletes from HOOKS_CONFLICTS the conflicts older than
// max_age that the recorder has acked, and only those: the stream has
// no JetStream max age (stream.ConflictsConfig), so a conflict stays
// however long Postgres is unreachable, and leaves once it is a row.
// Until the recorder's durable exists nothing is deleted. Like HOOKS's
// trim by age it waits for the oldest to be ageSlack past max_age.
func (g *storeGuard) trimConflicts(ctx context.Context) error {
	if g.maxAge <= 0 {
		return nil
	}
	conflicts, err := g.js.Stream(ctx, stream.Conflicts)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // an instance whose streams were not created here yet
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream.Conflicts, err)
	}
	st, now := conflicts.CachedInfo().State, time.Now()
	if st.Msgs == 0 || !st.FirstTime.Before(now.Add(-g.maxAge-time.Duration(ageSlack*float64(g.maxAge)))) {
		return nil
	}
	rec, err := conflicts.Consumer(ctx, conflictRecorder)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		g.slowLog(slog.LevelInfo, "conflicts", "HOOKS_CONFLICTS keeps conflicts older than max_age: the conflict recorder has not started yet",
			"first_seq", st.FirstSeq, "first_time", st.FirstTime)
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer %s of %s: %w", conflictRecorder, stream.Conflicts, err)
	}
	floor := rec.CachedInfo().AckFloor.Stream
	cut, err := ageCut(ctx, conflicts, st.FirstSeq, floor+1, now.Add(-g.maxAge))
	if err != nil {
		return err
	}
	if cut <= st.FirstSeq {
		g.slowLog(slog.LevelInfo, "conflicts", "HOOKS_CONFLICTS keeps conflicts older than max_age that are not recorded in Postgres yet",
			"first_seq", st.FirstSeq, "first_time", st.FirstTime, "recorded_up_to", floor)
		return nil
	}
	if err := conflicts.Purge(ctx, jetstream.WithPurgeSequence(cut)); err != nil {
		return fmt.Errorf("trim %s below sequence %d: %w", stream.Conflicts, cut, err)
	}
	g.log.Info("trimmed HOOKS_CONFLICTS of recorded conflicts older than max_age",
		"purged", cut-st.FirstSeq, "recorded_up_to", floor)
	return nil
}
