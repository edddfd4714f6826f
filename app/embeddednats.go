package app

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// EmbeddedNATSConfig tunes the JetStream server serve starts in its own
// process when nats_url is empty. An external server is tuned in its own
// configuration.
type EmbeddedNATSConfig struct {
	// SyncInterval is how often the server fsyncs its store: "always"
	// (after every write), or a duration (unset: [DefaultEmbeddedSync]).
	// docs/DEPLOYMENT.md, "Durability", says what each setting risks.
	SyncInterval SyncInterval `yaml:"sync_interval"`
}

// SyncInterval is a JetStream store's fsync setting: after every write
// (Always), or every Every in the background. The zero value is unset.
type SyncInterval struct {
	Always bool
	Every  time.Duration
}

// SyncAlways is the spelling of [SyncInterval.Always], as in
// nats-server's own sync_interval.
const SyncAlways = "always"

// DefaultEmbeddedSync is the embedded server's fsync setting when the
// configuration sets none: every write. nats-server's own default, every
// 2 minutes, loses up to two minutes of deliveries answered 202 when the
// host goes down (a power loss, a VM reset), where Postgres beside it
// loses no commit. Measured on the ingress (docs/DEPLOYMENT.md,
// "Durability"), an fsync per write cost about 0.7 ms per request at
// 100 requests/s, and a third of the closed-loop maximum (1,036 against
// 4,847 requests/s on a loaded 2-core VM): little at the rates one
// embedded server takes, for a 202 that survives a power loss.
var DefaultEmbeddedSync = SyncInterval{Always: true}

// IsZero reports an unset interval.
func (s SyncInterval) IsZero() bool { return !s.Always && s.Every == 0 }

// OrDefault is s, or [DefaultEmbeddedSync] when unset.
func (s SyncInterval) OrDefault() SyncInterval {
	if s.IsZero() {
		return DefaultEmbeddedSync
	}
	return s
}

func (s SyncInterval) String() string {
	switch {
	case s.Always:
		return SyncAlways
	case s.Every > 0:
		return s.Every.String()
	}
	return ""
}

// ParseSyncInterval reads "always" or a positive duration ("1s", "100ms").
func ParseSyncInterval(v string) (SyncInterval, error) {
	if v == SyncAlways {
		return SyncInterval{Always: true}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return SyncInterval{}, fmt.Errorf("%q: use always or a positive duration such as 1s or 100ms", v)
	}
	return SyncInterval{Every: d}, nil
}

// UnmarshalYAML reads the scalar "always" or a duration.
func (s *SyncInterval) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: sync_interval: use always or a duration such as 1s", n.Line)
	}
	v, err := ParseSyncInterval(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: sync_interval: %w", n.Line, err)
	}
	*s = v
	return nil
}

// MarshalYAML writes s as it is read: "always", a duration, or nothing.
func (s SyncInterval) MarshalYAML() (any, error) {
	if s.IsZero() {
		return nil, nil
	}
	return s.String(), nil
}
