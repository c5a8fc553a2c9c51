package daemon

import (
	"fmt"
	"io"
	"log/slog"
)

// newLogger is the process's logger: --log-format text or json, at
// --log-level. Raft's output reaches it through the cluster package.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	switch level {
	case "debug", "info", "warn", "error":
		lvl.UnmarshalText([]byte(level))
	default:
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
