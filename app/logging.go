package app

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// NewLogger is the logger cfg asks for (log_format, log_level), writing
// to w. cfg must be validated: an unknown level logs at info.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return l, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}
