package cluster

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/fsm"
)

// memSnapshotSink is a raft.SnapshotSink in memory.
type memSnapshotSink struct{ bytes.Buffer }

func (*memSnapshotSink) ID() string    { return "mem" }
func (*memSnapshotSink) Close() error  { return nil }
func (*memSnapshotSink) Cancel() error { return nil }

// stateAt returns a state machine that applied entries 1..applied.
func stateAt(t *testing.T, applied uint64) *fsm.FSM {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), fsm.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for i := uint64(1); i <= applied; i++ {
		if r := f.Apply(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fsm.EncodeSetNode(fmt.Sprintf("n%d", i), "127.0.0.1:1")}); r != nil {
			t.Fatalf("apply %d: %v", i, r)
		}
	}
	return f
}

func snapshotOf(t *testing.T, f *fsm.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSnapshotSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// A snapshot behind the applied index comes from a diverged history: the
// node stops (diverged is called, Restore fails) instead of going back in
// the log; one at or beyond it installs.
func TestRestoreBehindAppliedStopsNode(t *testing.T) {
	behind := snapshotOf(t, stateAt(t, 5))
	ahead := snapshotOf(t, stateAt(t, 12))

	var stopped error
	g := restoreGuard{FSM: stateAt(t, 10), diverged: func(err error) { stopped = err }}
	err := g.Restore(io.NopCloser(bytes.NewReader(behind)))
	if err == nil || stopped == nil || !strings.Contains(err.Error(), "history diverged") || !strings.Contains(err.Error(), "applied up to 10") {
		t.Fatalf("restore of a snapshot at 5 over applied 10: err %v, node stopped with %v; want both naming the divergence", err, stopped)
	}
	if !strings.Contains(err.Error(), "--join") {
		t.Errorf("error does not name the recovery step: %v", err)
	}

	stopped = nil
	g = restoreGuard{FSM: stateAt(t, 10), diverged: func(err error) { stopped = err }}
	if err := g.Restore(io.NopCloser(bytes.NewReader(ahead))); err != nil || stopped != nil {
		t.Fatalf("restore of a snapshot at 12 over applied 10: err %v, stopped %v; want it installed", err, stopped)
	}
	if got := g.AppliedIndex(); got != 12 {
		t.Errorf("applied index after restore = %d, want 12", got)
	}
}
