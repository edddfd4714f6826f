package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/engine"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// validOptions are options New accepts, each test changing one.
func validOptions() engine.Options {
	return engine.Options{Name: "opts", EventTypes: []string{"thing.done"},
		Handler: consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return nil })}
}

// New refuses every value out of range, naming the option, instead of
// running with a default in its place: a negative batch wait, ack wait,
// handler timeout, concurrency, postpone limit, prefetch or max ack
// pending, a batch size past MaxBatch, and a batch wait the in-progress
// acks (every third of the ack wait) would not cover.
func TestNewRefusesOptionsOutOfRange(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	cases := map[string]func(*engine.Options){
		"Name":           func(o *engine.Options) { o.Name = "a b" },
		"EventTypes":     func(o *engine.Options) { o.EventTypes = nil },
		"Sources":        func(o *engine.Options) { o.Sources = []string{"a.b"} },
		"Handler":        func(o *engine.Options) { o.Handler = nil },
		"Concurrency":    func(o *engine.Options) { o.Concurrency = -1 },
		"BatchSize":      func(o *engine.Options) { o.BatchSize = engine.MaxBatch + 1 },
		"BatchWait":      func(o *engine.Options) { o.BatchWait = -time.Millisecond },
		"AckWait":        func(o *engine.Options) { o.AckWait = -time.Second },
		"HandlerTimeout": func(o *engine.Options) { o.HandlerTimeout = -time.Second },
		"PostponeLimit":  func(o *engine.Options) { o.PostponeLimit = -time.Minute },
		"Prefetch":       func(o *engine.Options) { o.Prefetch = -1 },
		"MaxAckPending":  func(o *engine.Options) { o.MaxAckPending = -1 },
		"Partitions":     func(o *engine.Options) { o.Partitions = stream.MaxPartitions + 1 },
	}
	// The third of the ack wait, configured or the default.
	thirds := map[string]func(*engine.Options){
		"given":   func(o *engine.Options) { o.AckWait, o.BatchWait = 3*time.Second, time.Second },
		"default": func(o *engine.Options) { o.BatchWait = engine.DefaultAckWait / 3 },
	}
	refused := 0
	check := func(name, option string, edit func(*engine.Options)) {
		o := validOptions()
		edit(&o)
		c, err := engine.New(db.Pool, ns.JS, o)
		var oe *engine.OptionError
		if c != nil || !errors.As(err, &oe) || oe.Option != option || oe.Consumer != o.Name {
			t.Errorf("%s: consumer %v, error %v; want an OptionError naming %s", name, c, err, option)
			return
		}
		refused++
	}
	for option, edit := range cases {
		check(option, option, edit)
	}
	for name, edit := range thirds {
		check("batch wait of a third of the "+name+" ack wait", "BatchWait", edit)
	}
	if refused != len(cases)+len(thirds) {
		t.Fatalf("%d of %d refused", refused, len(cases)+len(thirds))
	}
	// Every problem is reported, not only the first.
	o := validOptions()
	o.Concurrency, o.PostponeLimit = -1, -1
	err := o.WithDefaults().Validate()
	var named []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var oe *engine.OptionError
		if errors.As(e, &oe) {
			named = append(named, oe.Option)
		}
	}
	if !slices.Equal(named, []string{"Concurrency", "PostponeLimit"}) {
		t.Fatalf("options named %v, want [Concurrency PostponeLimit]: %v", named, err)
	}
}

// A consumer runs with the options it was given and the defaults of the
// ones left at zero, the same WithDefaults gives (what config check
// prints); a negative max_deliver retries forever and is kept.
func TestNewRunsWithTheDefaults(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	o := validOptions()
	o.BatchSize, o.MaxDeliver = 16, -1
	c, err := engine.New(db.Pool, ns.JS, o)
	if err != nil {
		t.Fatal(err)
	}
	got, want := c.Options(), o.WithDefaults()
	if got.Concurrency != engine.DefaultConcurrency || got.BatchSize != 16 || got.BatchWait != engine.DefaultBatchWait ||
		got.AckWait != engine.DefaultAckWait || got.MaxDeliver != -1 || got.HandlerTimeout != engine.DefaultHandlerTimeout ||
		got.PostponeLimit != engine.DefaultPostponeLimit || len(got.Backoff) == 0 || got.Prefetch != 2*engine.DefaultConcurrency*16 ||
		got.MaxAckPending < 1000 || got.Logger == nil {
		t.Fatalf("running with %+v", got)
	}
	if got.Concurrency != want.Concurrency || got.Prefetch != want.Prefetch || got.MaxAckPending != want.MaxAckPending ||
		!slices.Equal(got.Backoff, want.Backoff) || got.Logger != want.Logger {
		t.Fatalf("running with %+v, WithDefaults gives %+v", got, want)
	}
	// WithDefaults changes nothing it already gave.
	if again := want.WithDefaults(); again.MaxAckPending != want.MaxAckPending || again.Prefetch != want.Prefetch {
		t.Fatalf("WithDefaults twice: %+v, once: %+v", again, want)
	}
}
