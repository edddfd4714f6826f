package bridge

import (
	"net/http"
	"time"
)

// Limits are the HTTP server's protections against slow and oversized
// requests. A zero field takes its default.
type Limits struct {
	// ReadHeaderTimeout bounds reading the request line and headers
	// (default 5s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included, from
	// the moment the connection is ready for it (default 30s). A client
	// that trickles its body is cut off sooner by [Options.MinBodyRate].
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of the headers to the end
	// of the answer, so it must cover the rest of ReadTimeout plus the
	// publish (Options.PublishTimeout) (default 40s).
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections left unused (default 2m).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (default 64 KiB).
	MaxHeaderBytes int
}

// DefaultLimits are the limits `hookbridge serve` uses.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      40 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// NewHTTPServer returns an http.Server for handler with limits applied
// (zero fields take [DefaultLimits]). Slow or endless requests are cut off
// instead of holding a connection and memory; [Options.MaxBodyMemory]
// bounds the bodies being read and [Options.MaxInFlight] how many
// requests are verified and published at once.
func NewHTTPServer(handler http.Handler, limits Limits) *http.Server {
	l := limits.withDefaults()
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}
