package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/durables"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// With delivery endpoints configured, EVENTS follows HOOKS's rule: nothing
// an endpoint has not received leaves it. The stream has no JetStream max
// age and refuses new messages when full (the relay's rows then wait in
// the outbox), and the storage guard deletes only the events below every
// durable's retention floor on EVENTS (each endpoint's, a disabled one's
// included: its durable is paused, its floor stays) and below the lowest
// sequence a delivery Postgres tracks still reads from EVENTS (failing,
// parked, replayed). It trims when the oldest event is older than
// streams.max_age, or when the stream is above the high-water mark of its
// byte bound, as for HOOKS.

// eventsGuard is what the storage guard needs to trim EVENTS.
type eventsGuard struct {
	// durables are the configured endpoints' durables: until each exists,
	// nothing is trimmed (their events are all unreceived).
	durables []string
	// pending is the lowest EVENTS sequence the pending deliveries in
	// Postgres read (ok false: none); delivery.EventsFloor. Required.
	pending func(ctx context.Context) (seq uint64, ok bool, err error)
	// maxBytes is the byte bound EVENTS should have (-1: none; 0: the
	// stream's own limit), lowered as HOOKS's is.
	maxBytes int64
	floors   durables.FloorCache
}

func (e *eventsGuard) bound(info *jetstream.StreamInfo) int64 {
	if e.maxBytes != 0 {
		return e.maxBytes
	}
	return info.Config.MaxBytes
}

// trimEvents purges EVENTS of what every endpoint has received when that
// is due, and returns how many messages it purged.
func (g *storeGuard) trimEvents(ctx context.Context, events jetstream.Stream, info *jetstream.StreamInfo) (uint64, error) {
	e, st, now := g.events, info.State, time.Now()
	bound := e.bound(info)
	short := aboveHighWater(info, bound)
	aged := g.maxAge > 0 && st.Msgs > 0 && st.FirstTime.Before(now.Add(-g.maxAge-time.Duration(ageSlack*float64(g.maxAge))))
	if !short && !aged {
		return 0, nil
	}
	floor, holder, err := g.eventsFloor(ctx, events, st.LastSeq)
	if err != nil {
		g.limiter.log(g.log, slog.LevelWarn, "trim events", "EVENTS is not trimmed", "reason", err)
		return 0, nil
	}
	limit := floor + 1 // never purged: sequences from limit on
	upTo := st.FirstSeq
	if short {
		upTo = max(upTo, byteCut(info, bound, limit, false))
	}
	if aged {
		cut, err := ageCut(ctx, events, st.FirstSeq, limit, now.Add(-g.maxAge))
		if err != nil {
			return 0, err
		}
		upTo = max(upTo, cut)
	}
	if upTo <= st.FirstSeq {
		if short {
			g.limiter.log(g.log, slog.LevelWarn, "trim events", "EVENTS is short of space; nothing to trim until every endpoint has received more",
				"first_seq", st.FirstSeq, "lowest_retention_floor", floor, "held_by", holder)
		} else {
			g.slowLog(slog.LevelInfo, "age events", "EVENTS keeps events older than max_age that an endpoint has not received yet",
				"first_seq", st.FirstSeq, "first_time", st.FirstTime, "held_by", holder, "lowest_retention_floor", floor)
		}
		return 0, nil
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSequence(upTo)); err != nil {
		return 0, fmt.Errorf("trim %s below sequence %d: %w", stream.Events, upTo, err)
	}
	purged := upTo - st.FirstSeq
	why := "older than max_age"
	if short {
		why = "to make room"
	}
	g.log.Info("trimmed EVENTS of events every endpoint has received, "+why,
		"purged", purged, "first_seq", upTo, "lowest_retention_floor", floor, "held_by", holder)
	return purged, nil
}

// eventsFloor is the highest EVENTS sequence every reader has done with
// (up to lastSeq, read before the consumers) and what holds it: a durable
// on EVENTS, or "delivery_pending". The durables are read before Postgres:
// a failed delivery is written there before its message is acked.
func (g *storeGuard) eventsFloor(ctx context.Context, events jetstream.Stream, lastSeq uint64) (uint64, string, error) {
	e := g.events
	consumers, err := durables.List(ctx, events)
	if err != nil {
		return 0, "", err
	}
	if e.floors == nil {
		e.floors = durables.FloorCache{}
	}
	floor, holder, err := durables.Floor(ctx, events, e.floors, consumers, e.durables, lastSeq)
	if err != nil {
		return 0, "", err
	}
	seq, ok, err := e.pending(ctx)
	if err != nil {
		return 0, "", err
	}
	if ok && seq <= floor {
		floor, holder = max(seq, 1)-1, "delivery_pending"
	}
	return floor, holder, nil
}
