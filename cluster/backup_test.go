package cluster_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/backup"
	"github.com/limitd/limitd/cluster/clustertest"
)

func backupBytes(t *testing.T, n *cluster.Node) ([]byte, backup.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := n.Backups().Open(ctx)
	if err != nil {
		t.Fatalf("open backup on %s: %v", n.ID(), err)
	}
	defer b.Close()
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), b.Header
}

// A backup holds the state of the index it names: its digest is the
// source's; a second backup with nothing applied in between reads the stored
// Raft snapshot; a follower's backup is its own consistent state; a restored
// data directory starts a node that elects itself with that state.
func TestBackupAndRestore(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.Node(c.Leader())
	spec := slidingLog(100, time.Hour)
	for i := 0; i < 20; i++ {
		if _, err := lead.Check(context.Background(), check("k", spec)); err != nil {
			t.Fatal(err)
		}
	}
	data, h := backupBytes(t, lead)
	digest, applied, err := lead.Catalog().Digest()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := backup.Inspect(bytes.NewReader(data), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Digest != digest || applied > h.Index || sum.Keys != 1 || len(sum.Members) != 3 {
		t.Fatalf("backup %+v at %d; leader digest %s at %d", sum, h.Index, digest, applied)
	}
	c.WaitConverged()
	// Followers must also have applied the barrier entry of the leader's
	// backup, so that a restarted one has nothing left to apply.
	last := lead.Raft().LastIndex()
	for _, n := range c.Nodes() {
		deadline := time.Now().Add(10 * time.Second)
		for n.Raft().AppliedIndex() < last {
			if time.Now().After(deadline) {
				t.Fatalf("%s applied %d of %d", n.ID(), n.Raft().AppliedIndex(), last)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i, n := range c.Nodes() {
		if n == lead {
			continue
		}
		fdata, _ := backupBytes(t, n)
		fs, err := backup.Inspect(bytes.NewReader(fdata), t.TempDir())
		if err != nil || fs.Digest != digest {
			t.Fatalf("follower n%d backup: %v, digest %s want %s", i, err, fs.Digest, digest)
		}
	}
	// A follower restarted with nothing to apply: Raft has "nothing new to
	// snapshot", and the stored snapshot (its backup's, at its state) is read.
	f := (c.Leader() + 1) % len(c.Nodes())
	_, fh := backupBytes(t, c.Node(f))
	c.Stop(f)
	c.Start(f)
	again, h2 := backupBytes(t, c.Node(f))
	sum2, err := backup.Inspect(bytes.NewReader(again), t.TempDir())
	if err != nil || h2.Index != fh.Index || sum2.Digest != digest {
		t.Fatalf("restarted follower's backup: %+v %v, before restart at %d", h2, err, fh.Index)
	}

	// Damaged: refused, nothing left behind.
	bad := filepath.Join(t.TempDir(), "bad")
	if _, err := backup.Restore(backup.RestoreConfig{DataDir: bad, NodeID: "r", RaftAddr: "r:1"}, bytes.NewReader(data[:len(data)-1])); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated backup: %v", err)
	}
	if entries, _ := os.ReadDir(bad); len(entries) != 0 {
		t.Fatalf("a failed restore left %d entries", len(entries))
	}

	// Restore and start a node on it.
	dir := filepath.Join(t.TempDir(), "restored")
	_, tr := raft.NewInmemTransport("restored:8300")
	if _, err := backup.Restore(backup.RestoreConfig{DataDir: dir, NodeID: "r1", RaftAddr: string(tr.LocalAddr())}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	n, err := cluster.Open(clustertest.FastConfig("r1", dir, "127.0.0.1:1", tr), false)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !n.IsLeader() {
		if ctx.Err() != nil {
			t.Fatal("the restored node did not elect itself")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := n.Raft().CurrentTerm(); got <= h.Term {
		t.Errorf("restored node at term %d, backup term %d: terms must not go back", got, h.Term)
	}
	res, err := n.Check(ctx, check("k", spec))
	if err != nil || !res[0].Allowed || res[0].Decisions[0].Remaining != 100-21 {
		t.Fatalf("check on the restored node: %+v %v, want remaining %d", res, err, 100-21)
	}
}
