package relay

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Test hooks; see testHooks. Set them before Run or RunOnce is called.

func SetBeforePublish(r *Relay, f func(eventID string) error) { r.hooks.beforePublish = f }

func SetAfterPublish(r *Relay, f func(eventIDs []string) error) { r.hooks.afterPublish = f }

func SetAcked(r *Relay, f func(eventID string, ack *jetstream.PubAck)) { r.hooks.acked = f }

func SetListening(r *Relay, f func()) { r.hooks.listening = f }

// SetOutageRepeat sets how often a failure that goes on is logged again.
func SetOutageRepeat(r *Relay, d time.Duration) { r.setOutageRepeat(d) }
