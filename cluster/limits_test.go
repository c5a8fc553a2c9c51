package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

func postInternal(t *testing.T, c *clustertest.Cluster, i int, path string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(c.URL(i)+path, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// The internal check endpoint takes no more than one entry's worth of bytes:
// a larger body is refused with 413 and nothing reaches Raft.
func TestInternalCheckRefusesOversizedBody(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.Node(0)
	before := n.Raft().LastIndex()
	spec := slidingLog(10, time.Hour)
	var ops []fsm.Op
	for size := 0; size <= cluster.MaxEntryBytes; size += 1000 {
		ops = append(ops, fsm.Op{Checks: []fsm.Check{{Key: strings.Repeat("k", 980), Spec: spec, Cost: 1}}})
	}
	body := fsm.AppendOps(nil, ops)
	code, msg := postInternal(t, c, 0, cluster.PathCheck, body)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d-byte forwarded body: %d %.200q, want 413", len(body), code, msg)
	}
	if after := n.Raft().LastIndex(); after != before {
		t.Fatalf("raft log grew from %d to %d for a refused body", before, after)
	}
	// Admin commands have their own, smaller bound.
	code, msg = postInternal(t, c, 0, cluster.PathApply, make([]byte, cluster.MaxCommandBytes+1))
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized admin command: %d %s, want 413", code, msg)
	}
}

// A forwarded batch with more ops than one entry may carry is split into
// several entries, each within BatchMaxOps, and every op is decided once.
func TestInternalCheckSplitsLargeBatch(t *testing.T) {
	c := newTestClusterWith(t, 1, func(cfg *cluster.Config) { cfg.BatchMaxOps = 100 })
	n := c.Node(0)
	spec := slidingLog(1, time.Hour)
	var ops []fsm.Op
	for i := 0; i < 350; i++ {
		ops = append(ops, fsm.Op{Checks: []fsm.Check{{Key: fmt.Sprint("split-", i), Spec: spec, Cost: 1}}})
	}
	before := n.Raft().LastIndex()
	code, body := postInternal(t, c, 0, cluster.PathCheck, fsm.AppendOps(nil, ops))
	if code != http.StatusOK {
		t.Fatalf("forwarded batch of 350 ops: %d %s", code, body)
	}
	res, err := fsm.DecodeResults(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(ops) {
		t.Fatalf("%d results for %d ops", len(res), len(ops))
	}
	for i, r := range res {
		if !r.Allowed {
			t.Fatalf("op %d refused: each key was checked once against a limit of 1", i)
		}
	}
	if grew := n.Raft().LastIndex() - before; grew < 4 {
		t.Fatalf("350 ops with BatchMaxOps 100 took %d entries, want at least 4", grew)
	}
	// Checked again, every key is now exhausted: each op was applied exactly once.
	_, body = postInternal(t, c, 0, cluster.PathCheck, fsm.AppendOps(nil, ops))
	res, _ = fsm.DecodeResults(body)
	for i, r := range res {
		if r.Allowed {
			t.Fatalf("op %d allowed twice", i)
		}
	}
}

// One atomic op too large for an entry cannot be split: 413 from the
// internal endpoint, cluster.ErrTooLarge from Check, and nothing is proposed.
func TestOpTooLargeForOneEntryIsRefused(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.Node(0)
	op := fsm.Op{All: true, Checks: make([]fsm.Check, 150_000)}
	for i := range op.Checks {
		op.Checks[i] = fsm.Check{Key: fmt.Sprint(i), Cost: 1, Policy: "p"}
	}
	if cluster.OpsSize([]fsm.Op{op}) <= cluster.MaxEntryBytes {
		t.Fatalf("test setup: the op's bound %d is within cluster.MaxEntryBytes", cluster.OpsSize([]fsm.Op{op}))
	}
	body := fsm.AppendOps(nil, []fsm.Op{op})
	if len(body) > cluster.MaxEntryBytes {
		t.Fatalf("test setup: body %d bytes is over the body limit; want an op under it whose entry bound is exceeded", len(body))
	}
	before := n.Raft().LastIndex()
	if code, msg := postInternal(t, c, 0, cluster.PathCheck, body); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("atomic op of %d checks: %d %s, want 413", len(op.Checks), code, msg)
	}
	if _, err := n.Check(context.Background(), []fsm.Op{op}); !errors.Is(err, cluster.ErrTooLarge) {
		t.Fatalf("Check of an op too large for one entry: %v, want cluster.ErrTooLarge", err)
	}
	if after := n.Raft().LastIndex(); after != before {
		t.Fatalf("raft log grew from %d to %d for refused ops", before, after)
	}
}
