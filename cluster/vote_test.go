package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/fsm"
)

// A node killed after receiving the leader's record of its incarnation, but
// before applying it, is admitted at the next start from its log: after a
// whole-cluster restart its vote may be needed to elect the leader that
// would replay the record (found by TestFaultsWipeKillPause: three nodes
// refusing each other's pre-votes). Another node's record does not count.
func TestAdmitFromLogRecord(t *testing.T) {
	dir := t.TempDir()
	inc, created, err := loadIncarnation(dir)
	if err != nil || !created || inc.Admitted {
		t.Fatalf("new directory: %+v created %v, %v; want a new, unadmitted incarnation", inc, created, err)
	}
	a := &admission{dir: dir, nodeID: "n2", id: inc.ID, log: discardLogger()}
	logs := raft.NewInmemStore()
	if err := logs.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: fsm.EncodeSetNode(incarnationKey("n3"), inc.ID)},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: fsm.EncodeSetNode(incarnationKey("n2"), "another incarnation")},
	}); err != nil {
		t.Fatal(err)
	}
	record := fsm.EncodeSetNode(incarnationKey("n2"), inc.ID)
	if err := a.admitFromLog(logs, record); err != nil || a.admitted.Load() {
		t.Fatalf("without its own record: admitted %v, %v", a.admitted.Load(), err)
	}
	if err := logs.StoreLog(&raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: record}); err != nil {
		t.Fatal(err)
	}
	if err := a.admitFromLog(logs, record); err != nil || !a.admitted.Load() {
		t.Fatalf("with its record in the log: admitted %v, %v", a.admitted.Load(), err)
	}
	// Durable: the next start reads it admitted.
	again, created, err := loadIncarnation(dir)
	if err != nil || created || again != (incarnation{ID: inc.ID, Admitted: true, NodeID: "n2"}) {
		t.Fatalf("reloaded %+v created %v, %v", again, created, err)
	}
}

// A directory with Raft state and no incarnation file (one backup.Restore
// built) keeps its vote; a damaged incarnation file stops the node with the
// recovery step.
func TestIncarnationRestoredAndDamaged(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "raft-wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	inc, created, err := loadIncarnation(dir)
	if err != nil || !created || !inc.Admitted {
		t.Fatalf("restored directory: %+v created %v, %v; want admitted", inc, created, err)
	}
	if err := os.WriteFile(filepath.Join(dir, incarnationFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadIncarnation(dir); err == nil || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("damaged file: %v", err)
	}
}

// A data directory records its node: opened under another node id it is
// refused with both names, instead of running forever, never ready. A file
// from before the record is claimed by the first node to open it.
func TestDataDirBelongsToItsNode(t *testing.T) {
	dir := t.TempDir()
	inc, _, err := loadIncarnation(dir)
	if err != nil {
		t.Fatal(err)
	}
	if inc, err = claimDataDir(dir, "n1", inc); err != nil || inc.NodeID != "n1" {
		t.Fatalf("claim a new directory: %+v %v", inc, err)
	}
	again, _, err := loadIncarnation(dir)
	if err != nil || again.NodeID != "n1" {
		t.Fatalf("reloaded %+v %v: the claim is not durable", again, err)
	}
	if _, err := claimDataDir(dir, "n1", again); err != nil {
		t.Fatalf("its own node: %v", err)
	}
	_, err = claimDataDir(dir, "n4", again)
	if err == nil || !strings.Contains(err.Error(), `belongs to node "n1"`) || !strings.Contains(err.Error(), `not to --node-id "n4"`) {
		t.Fatalf("another node id: %v", err)
	}
}
