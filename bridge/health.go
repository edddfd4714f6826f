package bridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultHealthHold is how long an unprobeable storage refusal keeps
// [Handler.PublishHealth] red after the last refused publish.
const DefaultHealthHold = 30 * time.Second

// probeEvery spaces the stream-info probes PublishHealth makes while red.
const probeEvery = time.Second

// publishHealth remembers whether JetStream's last answers refused to
// store for lack of room.
type publishHealth struct {
	mu        sync.Mutex
	refusedAt time.Time // zero: the last publish was stored
	stream    string    // the stream that refused
	cause     string    // "stream full" or "insufficient resources"
	err       error
	size      int // bytes of the refused message, data and headers
	lastProbe time.Time
	probing   bool
	// red mirrors !refusedAt.IsZero() for the hot path: every stored
	// publish calls noteStored, and without it each would take mu.
	red atomic.Bool
}

// noteStored records a publish stored in streamName: a refusal by that
// stream is over.
func (h *Handler) noteStored(streamName string) {
	p := &h.health
	if !p.red.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refusedAt.IsZero() && p.stream == streamName {
		p.refusedAt = time.Time{}
		p.red.Store(false)
	}
}

// noteRefused records a storage refusal by streamName.
func (h *Handler) noteRefused(streamName, cause string, size int, err error) {
	p := &h.health
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusedAt, p.stream, p.cause, p.size, p.err = time.Now(), streamName, cause, size, err
	p.red.Store(true)
}

// PublishHealth returns an error while JetStream refuses to store
// deliveries for lack of room (a stream at its max_bytes or max_msgs
// limit, or a server out of storage), nil otherwise. It is meant for
// readiness: while it is red, a load balancer sends deliveries elsewhere
// and senders retry later, instead of every request being answered 503.
//
// It turns red on a refused publish and green on the next stored one.
// Without traffic it still recovers: for a full stream, each call (at
// most once a second) reads the stream's state and clears the refusal as
// soon as the refused message would fit again; a refusal that cannot be
// probed that way (insufficient resources, on the server's disk) clears
// [Options.HealthHold] (default 30 s) after the last refused publish, so
// traffic comes back to find out.
func (h *Handler) PublishHealth() error {
	p := &h.health
	p.mu.Lock()
	if p.refusedAt.IsZero() {
		p.mu.Unlock()
		return nil
	}
	now := time.Now()
	age := now.Sub(p.refusedAt)
	refusal := fmt.Errorf("JetStream refused to store in %s: %s, %s ago: %w", p.stream, p.cause, age.Round(time.Millisecond), p.err)
	if p.cause != refusalStreamFull {
		if age >= h.opts.HealthHold {
			p.refusedAt = time.Time{}
			p.red.Store(false)
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
		return refusal
	}
	if p.probing || now.Sub(p.lastProbe) < probeEvery {
		p.mu.Unlock()
		return refusal
	}
	p.probing, p.lastProbe = true, now
	streamName, size, since := p.stream, p.size, p.refusedAt
	p.mu.Unlock()

	room, note := h.probeRoom(streamName, size)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.probing = false
	if room && p.refusedAt.Equal(since) {
		p.refusedAt = time.Time{}
		p.red.Store(false)
		return nil
	}
	if p.refusedAt.IsZero() {
		return nil // a publish was stored meanwhile
	}
	return fmt.Errorf("%w (%s)", refusal, note)
}

// storedSize is what a message takes in a file-store stream's byte count,
// as nats-server counts it against max_bytes: subject, encoded headers,
// data and 30 bytes of record overhead.
func storedSize(subject string, hdr map[string][]string, data []byte) int {
	n := len(subject) + len(data) + 30
	if len(hdr) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range hdr {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
	}
	return n
}

// probeRoom reads the stream's state and reports whether a message of
// size bytes fits under its limits again.
func (h *Handler) probeRoom(streamName string, size int) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, streamName)
	if err != nil {
		return false, fmt.Sprintf("probe: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return false, fmt.Sprintf("probe: %v", err)
	}
	cfg, st := info.Config, info.State
	switch {
	case cfg.MaxBytes > 0 && int64(st.Bytes)+int64(size) > cfg.MaxBytes:
		return false, fmt.Sprintf("still %d of %d bytes", st.Bytes, cfg.MaxBytes)
	case cfg.MaxMsgs > 0 && int64(st.Msgs) >= cfg.MaxMsgs:
		return false, fmt.Sprintf("still %d of %d messages", st.Msgs, cfg.MaxMsgs)
	}
	return true, ""
}
