package stream

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestSubjectSafety(t *testing.T) {
	t.Parallel()
	types := map[string]bool{
		"order.created":          true,
		"issues.opened":          true,
		"a-b_c.D9":               true,
		"":                       false,
		"order.>":                false,
		"order.*":                false,
		"order..created":         false,
		".order":                 false,
		"order.":                 false,
		"order created":          false,
		"order\x00created":       false,
		strings.Repeat("a", 201): false,
	}
	for typ, want := range types {
		if got := ValidEventType(typ); got != want {
			t.Errorf("ValidEventType(%q) = %v, want %v", typ, got, want)
		}
	}
	ids := map[string]bool{
		"evt_1":                  true,
		"msg_p5jXN8AQM9LWM0D4lo": true,
		"a:b/c":                  true,
		"":                       false,
		"has space":              false,
		"tab\t":                  false,
		"é":                      false,
		strings.Repeat("x", 256): false,
	}
	for id, want := range ids {
		if got := ValidEventID(id); got != want {
			t.Errorf("ValidEventID(%q) = %v, want %v", id, got, want)
		}
	}
	if got := HookSubject("demo", "order.created"); got != "hooks.demo.order.created" {
		t.Errorf("HookSubject = %q", got)
	}
	if got := HookFilter("", "order.created"); got != "hooks.*.order.created" {
		t.Errorf("HookFilter = %q", got)
	}
	if got := MsgID("demo", "evt-1"); got != "demo:evt-1" {
		t.Errorf("MsgID = %q", got)
	}
}

func TestStreamConfigs(t *testing.T) {
	t.Parallel()
	h := HooksConfig(Options{})
	if h.Duplicates != DefaultDuplicateWindow || h.Replicas != 1 || h.AllowDirect {
		t.Fatalf("HOOKS defaults = %+v", h)
	}
	// JetStream's max age deletes unapplied messages too; HOOKS's age
	// horizon is the storage guard's, for applied messages only.
	if h.MaxAge != 0 || h.MaxBytes != FallbackHooksMaxBytes {
		t.Fatalf("HOOKS max age %v, max bytes %d; want none and %d", h.MaxAge, h.MaxBytes, FallbackHooksMaxBytes)
	}
	if got := (Options{}).HooksMaxAge(); got != DefaultHooksMaxAge {
		t.Fatalf("HOOKS age horizon %v, want %v", got, DefaultHooksMaxAge)
	}
	if h.Retention.String() != "Limits" {
		t.Fatalf("HOOKS retention = %v: replays need limits-based retention", h.Retention)
	}
	// A full stream refuses new messages: deleting the oldest ones would
	// lose accepted webhooks (HOOKS), unrecorded conflicts or undelivered
	// events.
	for _, c := range []jetstream.StreamConfig{h, ConflictsConfig(Options{}), EventsConfig(Options{})} {
		if c.Discard != jetstream.DiscardNew {
			t.Fatalf("%s discard policy = %v, want DiscardNew", c.Name, c.Discard)
		}
	}
	e := EventsConfig(Options{Replicas: 3})
	if e.Replicas != 3 || e.Subjects[0] != "events.>" {
		t.Fatalf("EVENTS = %+v", e)
	}
}

func TestConsumerOfDurable(t *testing.T) {
	for _, c := range []struct {
		durable   string
		consumer  string
		partition int
	}{
		{"orders", "orders", -1},
		{PartitionDurable("orders", 3), "orders", 3},
		{"orders~p12", "orders", 12},
		{"orders~px", "", -1},
		{"a.b", "", -1},
		{"~p01", "", -1},
	} {
		got, p := ConsumerOfDurable(c.durable)
		if got != c.consumer || p != c.partition {
			t.Errorf("ConsumerOfDurable(%q) = %q, %d; want %q, %d", c.durable, got, p, c.consumer, c.partition)
		}
	}
}

func TestHooksMaxBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    Options
		want int64
	}{
		{Options{}, FallbackHooksMaxBytes},
		{Options{StoreMax: 100 << 30}, 50 << 30},
		{Options{MaxBytes: 5 << 20, StoreMax: 100 << 30}, 5 << 20},
		{Options{MaxBytes: -1, StoreMax: 100 << 30}, -1},
	} {
		if got := c.o.HooksMaxBytes(); got != c.want {
			t.Errorf("%+v: HooksMaxBytes = %d, want %d", c.o, got, c.want)
		}
		if got := HooksConfig(c.o).MaxBytes; got != c.want {
			t.Errorf("%+v: HooksConfig MaxBytes = %d, want %d", c.o, got, c.want)
		}
	}
	// Without delivery endpoints EVENTS stays unlimited unless max_bytes
	// is set, and keeps the max age.
	if c := EventsConfig(Options{StoreMax: 100 << 30}); c.MaxBytes != -1 || c.MaxAge != DefaultHooksMaxAge {
		t.Errorf("EVENTS max bytes %d, max age %v; want -1 and %v", c.MaxBytes, c.MaxAge, DefaultHooksMaxAge)
	}
	// With them it is bounded by bytes, a quarter of the store by
	// default, and has no max age: the storage guard trims it.
	for _, c := range []struct {
		o    Options
		want int64
	}{
		{Options{Delivery: true}, FallbackEventsMaxBytes},
		{Options{Delivery: true, StoreMax: 100 << 30}, 25 << 30},
		{Options{Delivery: true, MaxBytes: 5 << 20, StoreMax: 100 << 30}, 5 << 20},
		{Options{Delivery: true, MaxBytes: -1, StoreMax: 100 << 30}, -1},
	} {
		if got := EventsConfig(c.o); got.MaxBytes != c.want || got.MaxAge != 0 {
			t.Errorf("%+v: EventsConfig max bytes %d, max age %v; want %d and none", c.o, got.MaxBytes, got.MaxAge, c.want)
		}
	}
	// An explicit events max age is the operator's choice, with or without.
	for _, d := range []bool{true, false} {
		if got := EventsConfig(Options{Delivery: d, EventsAge: time.Hour}).MaxAge; got != time.Hour {
			t.Errorf("delivery %v, events age 1h: EVENTS max age %v", d, got)
		}
	}
}

func TestSafeMaxBytes(t *testing.T) {
	t.Parallel()
	info := func(limit int64, bytes uint64) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Config: jetstream.StreamConfig{MaxBytes: limit}, State: jetstream.StreamState{Bytes: bytes}}
	}
	for _, c := range []struct {
		name string
		cur  *jetstream.StreamInfo
		want int64
		got  int64
	}{
		{"new stream", nil, 1000, 1000},
		{"unlimited to a bound with room", info(-1, 800), 1000, 1000},
		{"unlimited to a bound it does not fit well under", info(-1, 901), 1000, -1},
		{"lowered below what it holds", info(5000, 2000), 1000, 5000},
		{"raised", info(1000, 1000), 2000, 2000},
		{"to unlimited", info(1000, 1000), 0, -1},
		{"unchanged while full", info(1000, 1000), 1000, 1000},
	} {
		if got := SafeMaxBytes(c.cur, c.want); got != c.got {
			t.Errorf("%s: SafeMaxBytes = %d, want %d", c.name, got, c.got)
		}
	}
}
