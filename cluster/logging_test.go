package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's hclog output reaches the process's slog handler, at its level,
// with events of normal operation lowered and hclog.Fmt arguments expanded.
func TestHCLogAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := newHCLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), "raft")
	records := func() []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("not JSON: %s", line)
			}
			out = append(out, m)
		}
		buf.Reset()
		return out
	}
	for _, c := range []struct {
		log  func()
		want string // level, "" for nothing logged
	}{
		{func() { l.Warn("heartbeat timeout reached, starting election") }, "INFO"},
		{func() { l.Warn("failed to get previous log", "error", "log not found") }, "INFO"},
		{func() { l.Error("failed to heartbeat to", "peer", "x", "error", "connection refused") }, ""},
		{func() {
			l.Error("failed to decode incoming command", "error", raft.ErrTransportShutdown)
		}, ""},
		{func() { l.Error("failed to decode incoming command", "error", errors.New("msgpack: bad type")) }, "ERROR"},
		{func() { l.Warn("failed to contact quorum of nodes, stepping down") }, "WARN"},
		{func() { l.Debug("debug detail") }, ""},
	} {
		c.log()
		got := records()
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("logged %v, want nothing at info", got)
		case c.want != "" && (len(got) != 1 || got[0]["level"] != c.want || got[0]["component"] != "raft"):
			t.Errorf("logged %v, want one %s line from component raft", got, c.want)
		}
	}
	l.Named("wal").With("segment", 3).Info("opened", "path", hclog.Fmt("%s/%d", "dir", 7))
	got := records()
	if len(got) != 1 || got[0]["component"] != "raft.wal" || got[0]["segment"] != float64(3) || got[0]["path"] != "dir/7" {
		t.Errorf("named logger with args: %v", got)
	}
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("levels: debug %v info %v level %v", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
}

type stringer struct{ a, b int }

func (s stringer) String() string { return "pair" }

// A Stringer argument (Raft logs itself as one) is its text in JSON, not {}.
func TestHCLogAdapterStringers(t *testing.T) {
	var buf bytes.Buffer
	l := newHCLog(slog.New(slog.NewJSONHandler(&buf, nil)), "raft")
	l.Info("entering follower state", "follower", stringer{1, 2}, "error", errors.New("boom"))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["follower"] != "pair" || m["error"] != "boom" {
		t.Fatalf("logged %s (%v)", buf.String(), err)
	}
}
