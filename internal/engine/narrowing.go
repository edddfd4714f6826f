package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A configuration change may narrow what a consumer reads: a source taken
// off it, fewer event types. Updated at once, its durables would stop
// delivering the messages they hold on the subjects dropped, every one of
// them answered 2xx and never applied. So a durable whose filter narrows
// keeps its wider filter, and the consumer applies what was stored on the
// dropped subjects up to the stream's last sequence at the change (the
// durable's metadata records it); what arrives there later is acked
// without being applied. Once everything up to that sequence is settled
// the durable takes the new filter. An instance that still runs the old
// configuration during a rolling change widens the filter again; the
// next new one to start narrows it from there.

// Metadata keys of a durable being narrowed.
const (
	metaNarrowUntil = "hookbridge.narrowing.until"
	metaNarrowKeep  = "hookbridge.narrowing.keep"
)

// narrowing is a durable's narrowing in progress.
type narrowing struct {
	until uint64   // stream sequence of the change
	keep  []string // the configured filters
}

// skips reports whether a message on subject at seq is one of the dropped
// subjects' and arrived after the change: it is acked, not applied.
func (n *narrowing) skips(subject string, seq uint64) bool {
	return n != nil && seq > n.until && !slices.ContainsFunc(n.keep, func(f string) bool { return subjectMatches(f, subject) })
}

// durable is a durable consumer as ensureDurable made it.
type durable struct {
	cons jetstream.Consumer
	cfg  jetstream.ConsumerConfig // as configured
	narr atomic.Pointer[narrowing]
}

// ensureDurable creates the durable of cfg or updates it to cfg, unless
// cfg narrows its filter while it still holds messages on the subjects
// dropped: then it keeps them too, until they are settled (see above).
func ensureDurable(ctx context.Context, js jetstream.JetStream, streamName string, cfg jetstream.ConsumerConfig, log *slog.Logger) (*durable, error) {
	d := &durable{cfg: cfg}
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", streamName, err)
	}
	cur, err := s.Consumer(ctx, cfg.Durable)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	var n *narrowing
	if err == nil {
		if n, err = narrowingOf(ctx, s, cur.CachedInfo(), cfg); err != nil {
			return nil, err
		}
	}
	want := cfg
	if n != nil {
		want = widened(cfg, cur.CachedInfo().Config, n)
	} else {
		want.Metadata = withoutNarrowing(cfg.Metadata)
	}
	if d.cons, err = js.CreateOrUpdateConsumer(ctx, streamName, want); err != nil {
		return nil, err
	}
	if n != nil {
		log.Info("consumer filter narrowed: the messages stored on the dropped subjects before the change are applied first",
			"durable", cfg.Durable, "until_seq", n.until, "dropped", strings.Join(dropped(filtersOf(want), cfg), " "))
	}
	d.narr.Store(n)
	return d, nil
}

// narrowingOf is the narrowing cfg starts or continues on the durable
// info describes, nil when there is none (the filter does not narrow,
// nothing is left to apply on the dropped subjects, or the narrowing is
// over).
func narrowingOf(ctx context.Context, s jetstream.Stream, info *jetstream.ConsumerInfo, cfg jetstream.ConsumerConfig) (*narrowing, error) {
	if len(dropped(filtersOf(info.Config), cfg)) == 0 || settledAll(info, 0) {
		return nil, nil
	}
	until, err := strconv.ParseUint(info.Config.Metadata[metaNarrowUntil], 10, 64)
	if err != nil || until == 0 {
		si, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("stream info: %w", err)
		}
		until = si.State.LastSeq
	}
	if settledAll(info, until) {
		return nil, nil
	}
	return &narrowing{until: until, keep: filtersOf(cfg)}, nil
}

// settledAll reports whether the durable has settled every message it was
// given up to until (0: every message).
func settledAll(info *jetstream.ConsumerInfo, until uint64) bool {
	if info.NumPending == 0 && info.NumAckPending == 0 {
		return true
	}
	return until > 0 && info.AckFloor.Stream >= until
}

// widened is cfg with the filters of the durable as it is (old) that cfg
// drops, and the narrowing's metadata. A configured filter that a dropped
// one covers is left out: JetStream refuses overlapping filters.
func widened(cfg, old jetstream.ConsumerConfig, n *narrowing) jetstream.ConsumerConfig {
	drop := dropped(filtersOf(old), cfg)
	filters := slices.Clone(drop)
	for _, f := range filtersOf(cfg) {
		if !slices.ContainsFunc(drop, func(d string) bool { return subjectCovers(d, f) }) {
			filters = append(filters, f)
		}
	}
	cfg.FilterSubject, cfg.FilterSubjects = "", filters
	cfg.Metadata = maps.Clone(cfg.Metadata)
	if cfg.Metadata == nil {
		cfg.Metadata = map[string]string{}
	}
	cfg.Metadata[metaNarrowUntil] = strconv.FormatUint(n.until, 10)
	cfg.Metadata[metaNarrowKeep] = strings.Join(n.keep, " ")
	return cfg
}

// dropped are the filters of have that cfg no longer covers.
func dropped(have []string, cfg jetstream.ConsumerConfig) []string {
	want := filtersOf(cfg)
	var out []string
	for _, h := range have {
		if !slices.ContainsFunc(want, func(w string) bool { return subjectCovers(w, h) }) {
			out = append(out, h)
		}
	}
	return out
}

func filtersOf(cfg jetstream.ConsumerConfig) []string {
	if cfg.FilterSubject != "" {
		return []string{cfg.FilterSubject}
	}
	return cfg.FilterSubjects
}

func withoutNarrowing(m map[string]string) map[string]string {
	if _, ok := m[metaNarrowUntil]; !ok {
		return m
	}
	m = maps.Clone(m)
	delete(m, metaNarrowUntil)
	delete(m, metaNarrowKeep)
	return m
}

// watchNarrowing ends d's narrowing once the durable has settled
// everything up to the change: the durable takes the configured filter.
// It returns when there is none (any more) or ctx ends.
func (d *durable) watchNarrowing(ctx context.Context, js jetstream.JetStream, streamName string, log *slog.Logger) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for d.narr.Load() != nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := d.narr.Load()
		info, err := d.cons.Info(ctx)
		if err != nil || !settledAll(info, n.until) {
			continue
		}
		cfg := d.cfg
		cfg.Metadata = withoutNarrowing(cfg.Metadata)
		if _, err := js.CreateOrUpdateConsumer(ctx, streamName, cfg); err != nil {
			log.Warn("could not narrow the consumer's filter; will retry", "durable", cfg.Durable, "err", err)
			continue
		}
		d.narr.Store(nil)
		log.Info("consumer filter narrowed: every message stored on the dropped subjects before the change is settled",
			"durable", cfg.Durable, "until_seq", n.until)
	}
}

// skip acks msg without applying it when the durable's narrowing says so,
// and reports whether it did.
func (d *durable) skip(msg jetstream.Msg, log *slog.Logger) bool {
	n := d.narr.Load()
	if n == nil {
		return false
	}
	md, err := msg.Metadata()
	if err != nil || !n.skips(msg.Subject(), md.Sequence.Stream) {
		return false
	}
	if err := msg.Ack(); err != nil {
		log.Warn("ack of a message on a dropped subject failed", "durable", d.cfg.Durable, "err", err)
	}
	return true
}

// subjectMatches reports whether subject (no wildcards) matches filter.
func subjectMatches(filter, subject string) bool { return subjectCovers(filter, subject) }

// subjectCovers reports whether every subject that filter b matches also
// matches filter a ('*' one token, '>' one or more at the end).
func subjectCovers(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i, t := range at {
		switch {
		case t == ">":
			return i < len(bt)
		case i >= len(bt):
			return false
		case bt[i] == ">":
			return false
		case t == "*" || t == bt[i]:
		default:
			return false
		}
	}
	return len(at) == len(bt)
}
