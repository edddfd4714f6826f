package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/internal/relay"
)

// A relay given a negative batch size, poll interval, number of
// attempts, backoff or publish timeout refuses to run, naming the option,
// instead of running with the default in its place: Run and RunOnce
// return the error and the pending row stays pending.
func TestRelayRefusesOptionsOutOfRange(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	enqueue(t, db.Pool, msg("ev-1", ""))
	cases := map[string]func(*relay.Options){
		"BatchSize":      func(o *relay.Options) { o.BatchSize = -1 },
		"PollInterval":   func(o *relay.Options) { o.PollInterval = -time.Second },
		"MaxAttempts":    func(o *relay.Options) { o.MaxAttempts = -1 },
		"BackoffBase":    func(o *relay.Options) { o.BackoffBase = -time.Second },
		"BackoffMax":     func(o *relay.Options) { o.BackoffMax = -time.Second },
		"PublishTimeout": func(o *relay.Options) { o.PublishTimeout = -time.Second },
	}
	refused := 0
	for option, edit := range cases {
		o := fastOpts()
		edit(&o)
		r := relay.NewRelay(db.Pool, ns.JS, o)
		// Refused at once; the deadline only ends a relay that runs.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		runErr := r.Run(ctx)
		cancel()
		n, onceErr := r.RunOnce(context.Background())
		var a, b *relay.OptionError
		if !errors.As(runErr, &a) || a.Option != option || !errors.As(onceErr, &b) || b.Option != option || n != 0 {
			t.Errorf("%s: Run %v, RunOnce %d, %v; want an OptionError naming %s", option, runErr, n, onceErr, option)
			continue
		}
		refused++
	}
	if refused != len(cases) {
		t.Fatalf("%d of %d refused", refused, len(cases))
	}
	if n := db.Count(t, `SELECT count(*) FROM hookbridge.outbox WHERE sent_at IS NULL AND attempts = 0`); n != 1 {
		t.Fatalf("pending untouched rows = %d, want 1", n)
	}
	// A negative retention keeps sent rows: it is a setting, not an error.
	o := fastOpts()
	o.Retention = -1
	if err := o.WithDefaults().Validate(); err != nil {
		t.Fatalf("negative retention: %v", err)
	}
}

// A relay runs with the options it was given and the defaults of the
// ones left at zero, the same WithDefaults gives (what config check
// prints); a backoff cap under the base is raised to it.
func TestRelayRunsWithTheDefaults(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t)
	ns := hookbridgetest.NATS(t)
	given := relay.Options{BatchSize: 64, BackoffBase: time.Minute, BackoffMax: time.Second, Retention: -1}
	got := relay.NewRelay(db.Pool, ns.JS, given).Options()
	want := relay.Options{BatchSize: 64, PollInterval: relay.DefaultPollInterval, MaxAttempts: relay.DefaultMaxAttempts,
		BackoffBase: time.Minute, BackoffMax: time.Minute, PublishTimeout: relay.DefaultPublishTimeout, Retention: -1}
	got.Logger = nil
	if got != want {
		t.Fatalf("running with %+v, want %+v", got, want)
	}
	if w := given.WithDefaults(); w.Logger == nil || w.PollInterval != want.PollInterval || w.BackoffMax != want.BackoffMax {
		t.Fatalf("WithDefaults gives %+v", w)
	}
	if r := (relay.Options{}).WithDefaults(); r.BatchSize != relay.DefaultBatchSize || r.Retention != relay.DefaultRetention {
		t.Fatalf("defaults %+v", r)
	}
}
