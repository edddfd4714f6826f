package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The retention floor the storage guard trims below is
// [durables.Floor]; what a trim by age cuts is ageCut.

// streamName is s's name, for errors (HOOKS or HOOKS_CONFLICTS).
func streamName(s jetstream.Stream) string {
	if info := s.CachedInfo(); info != nil {
		return info.Config.Name
	}
	return "stream"
}

// ageCut is the first sequence in [from, limit) of a message stored
// after cutoff, limit when every message before limit is older. Message
// times grow with their sequence, so it searches by halves; it looks at
// limit's predecessor first, since a consumer far behind makes that the
// answer, round after round.
func ageCut(ctx context.Context, hooks jetstream.Stream, from, limit uint64, cutoff time.Time) (uint64, error) {
	if limit <= from {
		return from, nil
	}
	newer := func(seq uint64) (bool, uint64, error) {
		m, err := hooks.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return true, seq, nil // nothing at or after seq
		}
		if err != nil {
			return false, 0, fmt.Errorf("read %s message at or after seq %d: %w", streamName(hooks), seq, err)
		}
		return m.Sequence >= limit || m.Time.After(cutoff), m.Sequence, nil
	}
	isNew, _, err := newer(limit - 1)
	if err != nil || !isNew {
		return limit, err
	}
	lo, hi := from, limit-1 // the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		isNew, at, err := newer(mid)
		if err != nil {
			return 0, err
		}
		if isNew {
			hi = mid // no message in [mid, at): cutting at mid or at at is the same
		} else {
			lo = at + 1
		}
	}
	return lo, nil
}
