package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Logging: the node logs through one *slog.Logger (Config.Logger), and
// hashicorp/raft's hclog output is routed into it by hclogAdapter, so the
// process has one format and one level. Raft logs several events of normal
// operation at Warn or Error; raftLevel lowers those, so Warn and Error mean
// an operator should look.

// LevelTrace is the slog level of hclog's Trace (below Debug).
const LevelTrace = slog.LevelDebug - 4

// raftLevel is the slog level for a Raft message logged at hclog level lvl.
func raftLevel(lvl hclog.Level, msg string, args []any) slog.Level {
	switch msg {
	case "heartbeat timeout reached, starting election", // every single-node start, every lost leader
		"Election timeout reached, restarting election", // a split vote
		"entering candidate state",
		"failed to get previous log",                 // a joining or lagging follower: the leader backs up
		"appendEntries rejected, sending older logs", // the leader's side of the same
		"new leader elected, stepping down",          // leadership transfer
		"peer has newer term, stopping replication",  // the old leader's side of it
		"rejecting vote request since we have a leader",
		"rejecting pre-vote request since we have a leader",
		"rejecting vote request since our last index is greater",
		"rejecting pre-vote request since our last index is greater",
		"rejecting vote request since our last term is greater",
		"rejecting pre-vote request since our last term is greater",
		"duplicate requestVote from",
		"no known peers, aborting election", // a node waiting to be added or bootstrapped
		"not part of stable configuration, aborting election",
		"heartbeat timeout reached, not part of a stable configuration or a non-voter, not triggering a leader election":
		return slog.LevelInfo
	case "failed to appendEntries to", // a peer that is down: reported once by watchPeers
		"failed to heartbeat to",
		"failed to pipeline appendEntries",
		"failed to start pipeline replication to",
		"failed to contact",
		"failed to make requestVote RPC",
		"failed to make requestPreVote RPC":
		return slog.LevelDebug
	case "failed to decode incoming command", "failed to accept connection":
		// A peer closing its connections (a clean stop, a restart) ends the
		// stream mid-read; only a malformed RPC is worth a warning.
		if errorArgIsDisconnect(args) {
			return slog.LevelDebug
		}
	}
	switch lvl {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// errorArgIsDisconnect reports whether the "error" argument says a
// connection ended (EOF, reset, closed) rather than carried bad data.
func errorArgIsDisconnect(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "error" {
			continue
		}
		s := fmt.Sprint(args[i+1])
		for _, d := range []string{"EOF", "connection reset", "use of closed network connection", "broken pipe", "i/o timeout", raft.ErrTransportShutdown.Error()} {
			if strings.Contains(s, d) {
				return true
			}
		}
	}
	return false
}

// hclogAdapter is an hclog.Logger writing to a slog.Logger. The level is the
// slog handler's; SetLevel is ignored (limitd sets one level per process).
type hclogAdapter struct {
	base    *slog.Logger // with the implied arguments, without the name
	l       *slog.Logger // base with component=name
	name    string
	implied []any
}

func newHCLog(l *slog.Logger, name string) hclog.Logger {
	return &hclogAdapter{base: l, l: l.With("component", name), name: name}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := raftLevel(level, msg, args)
	ctx := context.Background()
	if !a.l.Enabled(ctx, lvl) {
		return
	}
	a.l.Log(ctx, lvl, msg, convertArgs(args)...)
}

// convertArgs expands hclog.Format values (hclog.Fmt) into strings, and
// logs Stringers (Raft passes itself) as their text, as hclog does: a JSON
// handler would otherwise marshal their fields.
func convertArgs(args []any) []any {
	var out []any
	for i, v := range args {
		var s string
		switch x := v.(type) {
		case hclog.Format:
			if len(x) == 0 {
				continue
			}
			s = fmt.Sprintf(fmt.Sprint(x[0]), x[1:]...)
		case error:
			continue // slog logs an error's text
		case fmt.Stringer:
			s = x.String()
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = s
	}
	if out == nil {
		return args
	}
	return out
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(l slog.Level) bool { return a.l.Enabled(context.Background(), l) }
func (a *hclogAdapter) IsTrace() bool             { return a.enabled(LevelTrace) }
func (a *hclogAdapter) IsDebug() bool             { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsInfo() bool              { return a.enabled(slog.LevelInfo) }
func (a *hclogAdapter) IsWarn() bool              { return a.enabled(slog.LevelWarn) }
func (a *hclogAdapter) IsError() bool             { return a.enabled(slog.LevelError) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	args = convertArgs(args)
	return &hclogAdapter{base: a.base.With(args...), l: a.l.With(args...), name: a.name,
		implied: append(append([]any(nil), a.implied...), args...)}
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.ResetNamed(name)
}

// ResetNamed keeps the implied arguments but sets the component name.
func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{base: a.base, l: a.base.With("component", name), name: name, implied: a.implied}
}

func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, c := range []struct {
		s slog.Level
		h hclog.Level
	}{{LevelTrace, hclog.Trace}, {slog.LevelDebug, hclog.Debug}, {slog.LevelInfo, hclog.Info}, {slog.LevelWarn, hclog.Warn}} {
		if a.enabled(c.s) {
			return c.h
		}
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{a}
}

// stdWriter logs each write as one Info line.
type stdWriter struct{ a *hclogAdapter }

func (w stdWriter) Write(p []byte) (int, error) {
	w.a.Info(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
