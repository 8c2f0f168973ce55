package server

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// NewLogger returns the logger a replica logs with: JSON (for collectors)
// or text (for people), at the configured level.
func NewLogger(w io.Writer, cfg Config) *slog.Logger {
	level, err := parseLevel(cfg.LogLevel)
	if err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h).With(slog.String("replica", cfg.Replica))
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q", s)
}
