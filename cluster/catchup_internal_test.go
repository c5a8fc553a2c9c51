package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func storeLogs(t *testing.T, s raft.LogStore, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := s.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand}); err != nil {
			t.Fatal(err)
		}
	}
}

// A snapshot Create past everything the node's Raft holds is an install
// from the leader: Ready is held until Raft's last index reaches it, and a
// cancelled copy releases it. A snapshot the node takes itself holds nothing.
func TestInstallStoreMarksInstallsOnly(t *testing.T) {
	var c catchup
	c.learn(0)
	logs := raft.NewInmemStore()
	storeLogs(t, logs, 1, 10)
	s := installStore{SnapshotStore: raft.NewInmemSnapshotStore(), c: &c, logs: logs}

	own, err := s.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.check(10, 10); err != nil {
		t.Fatalf("own snapshot held Ready: %v", err)
	}

	in, err := s.Create(raft.SnapshotVersionMax, 500, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.check(10, 10); err == nil || !strings.Contains(err.Error(), "installing a snapshot") {
		t.Fatalf("Ready during the copy of an install: %v", err)
	}
	// A snapshot of its own, taken meanwhile, does not end the install.
	own, err = s.Create(raft.SnapshotVersionMax, 9, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.check(10, 10); err == nil {
		t.Fatal("Ready during an install once the node took a snapshot of its own")
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	// Copied, not restored: Raft has not recorded it as its last snapshot.
	if err := c.check(10, 10); err == nil {
		t.Fatal("Ready after the copy, before the restore")
	}
	// Restored: Raft's last index is the snapshot's, though the state
	// machine's own index may be below it (no-op entries).
	if err := c.check(498, 500); err != nil {
		t.Fatalf("restored install still holds Ready: %v", err)
	}

	storeLogs(t, logs, 11, 20)
	cancelled, err := s.Create(raft.SnapshotVersionMax, 900, 3, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.check(20, 500) == nil {
		t.Fatal("Ready during a second install")
	}
	if err := cancelled.Cancel(); err != nil {
		t.Fatal(err)
	}
	if err := c.check(20, 500); err != nil {
		t.Fatalf("a cancelled install still holds Ready: %v", err)
	}
}

// After a start, Ready waits until the leader's applied index is known and
// reached (within the slack), then stays caught up.
func TestCatchupWaitsForTheLeadersAppliedIndex(t *testing.T) {
	var c catchup
	if err := c.check(100, 100); err == nil {
		t.Fatal("Ready before the leader's progress is known")
	}
	c.learn(1000)
	c.learn(5) // the first answer counts
	if err := c.check(1000-catchupSlack-1, 1000); err == nil {
		t.Fatal("Ready more than the slack behind the leader")
	}
	if err := c.check(1000-catchupSlack, 1000); err != nil {
		t.Fatalf("not ready within the slack: %v", err)
	}
	if err := c.check(0, 0); err != nil {
		t.Fatalf("caught up once is latched: %v", err)
	}
}
