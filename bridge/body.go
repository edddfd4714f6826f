package bridge

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Reading a body is bounded separately from verifying and publishing it.
// A sender that sends its headers and then trickles the body holds only
// the memory it managed to send and a goroutine, never one of the
// MaxInFlight slots: those are taken once the body is in. Two bounds keep
// slow senders from hurting anyone else:
//
//   - memory: every byte of body buffer is reserved against
//     MaxBodyMemory before it is allocated, and the buffer grows (doubling,
//     up to the declared Content-Length) only as the body arrives; a
//     request that would go over is answered 503 overloaded. So bodies
//     being read or held never take more than MaxBodyMemory, however many
//     senders there are, and a sender holds about twice what it has sent,
//     never what it merely declared.
//   - time: the body must keep arriving at MinBodyRate after a grace
//     period (a read deadline on the connection, moved forward as bytes
//     come), and within the server's ReadTimeout in any case. A trickling
//     sender is cut off after a few seconds instead of the whole
//     ReadTimeout.

// DefaultMinBodyRate is the slowest accepted body upload, after
// [BodyReadGrace]: 16 KiB/s, so a 1 MiB body may take about a minute
// (the server's ReadTimeout, 30 s by default, ends it first).
const DefaultMinBodyRate = 16 << 10

// BodyReadGrace is the time a body may take before MinBodyRate applies,
// plus the time for its first 32 KiB at that rate.
const BodyReadGrace = 2 * time.Second

// bodyFirstChunk is the first buffer of a body with a declared length:
// most webhook bodies fit, so they are read with one allocation.
const bodyFirstChunk = 32 << 10

// bodyRateSlack is how many bytes ahead of the rate the deadline is set,
// so a sender that writes in bursts is not cut off between them.
const bodyRateSlack = 32 << 10

// Errors reading a body, mapped to answers by serve.
var (
	errBodyTooLarge = errors.New("body too large")
	errBodyMemory   = errors.New("no room to buffer the body")
	errBodyTooSlow  = errors.New("body too slow")
)

// bodyBudget is the memory all bodies being read or held may take.
type bodyBudget struct {
	limit int64 // <= 0: no bound
	used  atomic.Int64
}

// reserve takes n bytes from the budget, or reports false.
func (b *bodyBudget) reserve(n int64) bool {
	if b.limit <= 0 {
		return true
	}
	for {
		cur := b.used.Load()
		if cur+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (b *bodyBudget) release(n int64) {
	if b.limit > 0 && n > 0 {
		b.used.Add(-n)
	}
}

// readBody reads the whole body within MaxBodyBytes, the memory budget
// and the minimum rate. The caller must call release once done with the
// body (it returns the reserved memory), also after an error.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), err error) {
	limit := h.opts.MaxBodyBytes
	var reserved int64
	release = func() { h.bodies.release(reserved) }
	if r.ContentLength > limit {
		return nil, release, errBodyTooLarge
	}
	if r.ContentLength == 0 {
		// Nothing to read, and nothing to pace: net/http is already
		// reading the connection in the background (to notice the client
		// leave), and a rate deadline set now would end that read a few
		// seconds in and cancel the request's context mid-publish.
		return []byte{}, release, nil
	}
	// The buffer ends one byte past the declared length, so EOF is seen
	// without a reallocation, but it grows to that size only as bytes
	// come: a declared length is a promise, and reserving it at once
	// would let senders who never keep it fill the budget with promises.
	// A chunked body starts small and grows up to the limit.
	target := limit + 1
	want := int64(4 << 10)
	if r.ContentLength >= 0 {
		target = min(r.ContentLength+1, limit+1)
		want = bodyFirstChunk
	}
	want = min(want, target)
	if !h.bodies.reserve(want) {
		return nil, release, errBodyMemory
	}
	reserved = want
	buf := make([]byte, 0, want)

	pace := h.newPacer(w, r)
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			grow := min(int64(cap(buf)), target-int64(cap(buf)))
			if grow <= 0 {
				grow = 1 // MaxBytesReader reports the overflow on this read
			}
			if !h.bodies.reserve(grow) {
				return nil, release, errBodyMemory
			}
			reserved += grow
			nb := make([]byte, len(buf), int64(cap(buf))+grow)
			copy(nb, buf)
			buf = nb
		}
		pace.before(len(buf))
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return buf, release, nil
			}
			var tooBig *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &tooBig):
				return nil, release, errBodyTooLarge
			case errors.As(err, &ne) && ne.Timeout():
				return nil, release, errBodyTooSlow
			}
			return nil, release, err
		}
	}
}

// pacer moves the connection's read deadline forward as the body arrives:
// start + grace + (received + slack) / rate, never past the server's
// ReadTimeout from start.
type pacer struct {
	rc       *http.ResponseController
	start    time.Time
	rate     int64
	maxEnd   time.Time // zero: no cap
	disabled bool
	set      time.Time // deadline last set
}

func (h *Handler) newPacer(w http.ResponseWriter, r *http.Request) *pacer {
	p := &pacer{rc: http.NewResponseController(w), start: time.Now(), rate: h.opts.MinBodyRate}
	if p.rate <= 0 {
		p.disabled = true
	}
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.ReadTimeout > 0 {
		p.maxEnd = p.start.Add(srv.ReadTimeout)
	}
	return p
}

// before is called before each read, with the bytes received so far.
func (p *pacer) before(received int) {
	if p.disabled {
		return
	}
	d := p.start.Add(BodyReadGrace + time.Duration(int64(received)+bodyRateSlack)*time.Second/time.Duration(p.rate))
	if !p.maxEnd.IsZero() && d.After(p.maxEnd) {
		d = p.maxEnd
	}
	// Moving a deadline costs a timer reset; skip moves under 100 ms.
	if !p.set.IsZero() && d.Sub(p.set) < 100*time.Millisecond {
		return
	}
	if err := p.rc.SetReadDeadline(d); err != nil {
		p.disabled = true // not a net/http connection (a test recorder)
		return
	}
	p.set = d
}
