package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// trim purges HOOKS of what no consumer needs when that is due: below
// the lowest retention floor, the messages older than the age horizon,
// and when space runs short, down to the low-water mark of the byte
// bound or (the server's store is full, whose size no client can see)
// all of them. It returns how many messages it purged.
func (g *storeGuard) trim(ctx context.Context, hooks jetstream.Stream, info *jetstream.StreamInfo,
	consumers []*jetstream.ConsumerInfo, all bool) (uint64, error) {
	st, now := info.State, time.Now()
	short := all || aboveHighWater(info, g.bound(info))
	aged := g.maxAge > 0 && st.Msgs > 0 && st.FirstTime.Before(now.Add(-g.maxAge-time.Duration(ageSlack*float64(g.maxAge))))
	if !short && !aged {
		return 0, nil
	}
	needed := append(slices.Clip(g.consumers), g.keylessNeeded(ctx, hooks)...)
	floor, holder, err := durables.Floor(ctx, hooks, g.floorCache(), consumers, needed, st.LastSeq)
	if err != nil {
		g.limiter.log(g.log, slog.LevelWarn, "trim", "HOOKS is not trimmed", "reason", err)
		return 0, nil
	}
	limit := floor + 1 // never purged: sequences from limit on
	upTo := st.FirstSeq
	if short {
		upTo = max(upTo, byteCut(info, g.bound(info), limit, all))
	}
	if aged {
		cut, err := ageCut(ctx, hooks, st.FirstSeq, limit, now.Add(-g.maxAge))
		if err != nil {
			return 0, err
		}
		upTo = max(upTo, cut)
	}
	if upTo <= st.FirstSeq {
		g.logHeld(short, st, floor, holder)
		return 0, nil
	}
	if err := hooks.Purge(ctx, jetstream.WithPurgeSequence(upTo)); err != nil {
		return 0, fmt.Errorf("trim %s below sequence %d: %w", stream.Hooks, upTo, err)
	}
	purged := upTo - st.FirstSeq
	if g.m != nil {
		g.m.HooksTrimmed(purged)
	}
	why := "older than max_age"
	if short {
		why = "to make room"
	}
	g.log.Info("trimmed HOOKS of messages every consumer has applied, "+why+"; replays now reach back to replay_from_seq",
		"purged", purged, "replay_from_seq", upTo, "lowest_retention_floor", floor, "held_by", holder)
	return purged, nil
}

// byteCut is where a trim for room ends: below limit, and for a byte
// bound only down to its low-water mark.
func byteCut(info *jetstream.StreamInfo, bound int64, limit uint64, all bool) uint64 {
	st := info.State
	if all || bound <= 0 || st.Msgs == 0 {
		return limit
	}
	excess := float64(st.Bytes) - guardLowWater*float64(bound)
	perMsg := float64(st.Bytes) / float64(st.Msgs)
	return min(limit, st.FirstSeq+uint64(max(excess, 0)/perMsg)+1)
}

// logHeld says, now and then, that a consumer holds messages the guard
// would otherwise trim.
func (g *storeGuard) logHeld(short bool, st jetstream.StreamState, floor uint64, holder string) {
	if short {
		g.limiter.log(g.log, slog.LevelWarn, "trim", "HOOKS is short of space; nothing to trim until every consumer has applied more",
			"first_seq", st.FirstSeq, "lowest_retention_floor", floor, "held_by", holder)
		return
	}
	g.slowLog(slog.LevelInfo, "age", "HOOKS keeps messages older than max_age that a consumer has not applied yet",
		"first_seq", st.FirstSeq, "first_time", st.FirstTime, "held_by", holder, "lowest_retention_floor", floor)
}

// slowLog logs a line that repeats while a consumer is behind at most
// every 15 minutes.
func (g *storeGuard) slowLog(level slog.Level, key, msg string, args ...any) {
	g.slow.mu.Lock()
	if g.slow.every == 0 {
		g.slow.every = 15 * time.Minute
	}
	g.slow.mu.Unlock()
	g.slow.log(g.log, level, key, msg, args...)
}

func (g *storeGuard) floorCache() durables.FloorCache {
	if g.floors == nil {
		g.floors = durables.FloorCache{}
	}
	return g.floors
}

// bound is HOOKS's byte bound: the configured one, else the stream's
// limit (≤ 0: none).
func (g *storeGuard) bound(info *jetstream.StreamInfo) int64 {
	if g.maxBytes != 0 {
		return g.maxBytes
	}
	return info.Config.MaxBytes
}

// lowerLimit gives HOOKS its byte bound once that deletes nothing: an
// update at start keeps a larger limit while the stream holds more
// (stream.SafeMaxBytes).
func (g *storeGuard) lowerLimit(ctx context.Context, info *jetstream.StreamInfo) {
	g.lowerTo(ctx, info, g.maxBytes)
}

// lowerTo gives the stream of info the byte bound want (0: leave it;
// -1: none) once that deletes nothing.
func (g *storeGuard) lowerTo(ctx context.Context, info *jetstream.StreamInfo, want int64) {
	have, name := info.Config.MaxBytes, info.Config.Name
	if want == 0 || have == want || (have <= 0 && want < 0) {
		return
	}
	if stream.SafeMaxBytes(info, want) != want {
		g.slowLog(slog.LevelInfo, "bound "+name, name+" holds more than its byte bound; it keeps its larger limit until trimmed below it",
			"bytes", info.State.Bytes, "bound", want, "limit", have)
		return
	}
	cfg := info.Config
	cfg.MaxBytes = want
	if _, err := g.js.UpdateStream(ctx, cfg); err != nil {
		g.limiter.log(g.log, slog.LevelWarn, "bound "+name, "could not set "+name+"'s byte bound; will retry", "bound", want, "err", err)
		return
	}
	g.log.Info(name+"'s byte limit set to its bound", "bound", want, "was", have)
}

func aboveHighWater(info *jetstream.StreamInfo, bound int64) bool {
	return bound > 0 && float64(info.State.Bytes) >= guardHighWater*float64(bound)
}
