package fsm

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/limitd/limitd/algo"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

func takeSnapshot(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatal("Persist did not close the sink")
	}
	return sink.Bytes()
}

func TestSnapshotRestore(t *testing.T) {
	// With shared commits the source's last applies and the destination's
	// junk are still uncommitted when Snapshot and Restore run.
	for _, commit := range []int{1, 1000} {
		t.Run(fmt.Sprintf("commit every %d", commit), func(t *testing.T) {
			testSnapshotRestore(t, Options{NoSync: true, CommitEvery: commit})
		})
	}
}

func testSnapshotRestore(t *testing.T, opts Options) {
	ls := logOf(1, testLog(t, 300)...)
	cut := 180
	src := openFSM(t, "", opts)
	applyIn(src, ls[:cut], 10)

	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, wantPolicies, wantNodes := digest(t, src), src.Policies(), src.Nodes()
	// Entries applied after Snapshot() returned are not in the snapshot,
	// even though Persist runs later.
	wantLater := applyIn(src, ls[cut:], 10)
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	dst := openFSM(t, "", opts)
	junk := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})
	newDriver(t, dst).check(t0, Op{Checks: []Check{{Key: "junk", Spec: &junk, Cost: 1}}})
	if dst.Stats().Keys != 1 {
		t.Fatal("setup: no state to discard")
	}
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if digest(t, dst) != wantDigest || dst.AppliedIndex() != uint64(cut) {
		t.Fatalf("restored: applied %d, digest differs: %v", dst.AppliedIndex(), digest(t, dst) != wantDigest)
	}
	if !reflect.DeepEqual(dst.Policies(), wantPolicies) || !reflect.DeepEqual(dst.Nodes(), wantNodes) {
		t.Fatal("restore did not reload policies and nodes")
	}
	// Raft replays from the snapshot index on (and possibly earlier
	// entries, which are skipped): same decisions as the source made.
	got := applyIn(dst, ls[cut-5:], 10)
	for i := range got[:5] {
		if got[i] != ErrAlreadyApplied {
			t.Fatalf("entry %d at or below the snapshot index was applied again", cut-5+i+1)
		}
	}
	if !reflect.DeepEqual(got[5:], wantLater) {
		t.Fatal("decisions after restore differ from the source's")
	}
	if digest(t, dst) != digest(t, src) {
		t.Fatal("digests diverged after applying the same entries")
	}
}

func TestRestoreRejectsDamagedSnapshot(t *testing.T) {
	src := openFSM(t, "", Options{})
	applyIn(src, logOf(1, testLog(t, 60)...), 10)
	snap := takeSnapshot(t, src)

	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		{"truncated", snap[:len(snap)*2/3]},
		{"garbage", bytes.Repeat([]byte{7}, 5000)},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := openFSM(t, "", Options{})
			d := newDriver(t, dst)
			s := src.Policies()[0]
			d.putPolicy(s)
			d.one(t0, s.Name, "mine", 1)
			before, policies := digest(t, dst), dst.Policies()
			if err := dst.Restore(io.NopCloser(bytes.NewReader(tc.stream))); err == nil {
				t.Fatal("Restore accepted a damaged snapshot")
			}
			if digest(t, dst) != before || dst.AppliedIndex() != 2 || !reflect.DeepEqual(dst.Policies(), policies) {
				t.Fatal("a failed restore changed the state")
			}
			d.one(t0, s.Name, "mine", 1) // still usable
		})
	}
}
