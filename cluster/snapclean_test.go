package cluster_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/limitd/limitd/cluster/clustertest"
)

// TestUnfinishedSnapshotRemovedAtStart: a snapshot directory a process
// killed halfway left behind ("<name>.tmp") is removed when the node starts
// again; completed snapshots stay.
func TestUnfinishedSnapshotRemovedAtStart(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	c.Stop(0)
	snaps := filepath.Join(c.DataDir(0), "snapshots")
	tmp := filepath.Join(snaps, "2-10-1700000000000.tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "state.bin"), make([]byte, 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(snaps)
	c.Start(0)
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the unfinished snapshot is still there after a start: %v", err)
	}
	after, _ := os.ReadDir(snaps)
	if len(after) != len(before)-1 {
		t.Fatalf("snapshots before the start %v, after %v: only the unfinished one should go", before, after)
	}
}
