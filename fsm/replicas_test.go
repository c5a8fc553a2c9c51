package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// TestReplicasAgreeWithStateCache: three replicas with different cache
// bounds and commit intervals, one of them restoring snapshots of another and
// replaying, answer every entry alike and agree on their digests whenever
// asked, over a workload of 300 keys whose states expire and come back.
func TestReplicasAgreeWithStateCache(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	specs := []algo.Config{
		{Algorithm: "fixed_window", Limit: 5, Window: "1s"},
		{Algorithm: "sliding_log", Limit: 4, Window: "2s"},
		{Algorithm: "sliding_window", Limit: 6, Window: "1s"},
		{Algorithm: "token_bucket", Limit: 3, Window: "1s", Burst: 5},
	}
	var cmds [][]byte
	for i, c := range specs {
		cmds = append(cmds, EncodePutPolicy(Policy{Name: fmt.Sprintf("p%d", i), Spec: mustSpec(t, c)}))
	}
	now := t0
	for len(cmds) < 1200 {
		now += int64(rng.Intn(30)) * int64(time.Millisecond)
		if rng.Intn(10) == 0 {
			cmds = append(cmds, EncodeExpire(now, 1+rng.Intn(50)))
			continue
		}
		ops := make([]Op, 1+rng.Intn(20))
		for j := range ops {
			ops[j] = Op{Checks: []Check{{Key: fmt.Sprintf("k%d", rng.Intn(300)), Policy: fmt.Sprintf("p%d", rng.Intn(4)), Cost: int64(rng.Intn(2))}}}
			if rng.Intn(5) == 0 {
				ops[j].RequestID = fmt.Sprintf("r%d", rng.Intn(100))
			}
		}
		cmds = append(cmds, EncodeCheck(nil, now, int64(time.Second), ops))
	}
	ls := logOf(1, cmds...)
	a := openFSM(t, "", Options{NoSync: true})
	b := openFSM(t, "", Options{NoSync: true, CommitEvery: 1000, CacheKeys: 50})
	c := openFSM(t, "", Options{NoSync: true, CommitEvery: 7, CacheKeys: 10})
	var snap []byte
	for i := 0; i < len(ls); {
		n := 1 + rng.Intn(10)
		end := min(i+n, len(ls))
		ra := a.ApplyBatch(ls[i:end])
		rb := b.ApplyBatch(ls[i:end])
		rc := c.ApplyBatch(ls[i:end])
		for k := range ra {
			if fmt.Sprint(ra[k]) != fmt.Sprint(rb[k]) || fmt.Sprint(ra[k]) != fmt.Sprint(rc[k]) {
				t.Fatalf("entry %d: %v / %v / %v", i+k+1, ra[k], rb[k], rc[k])
			}
		}
		i = end
		if rng.Intn(20) == 0 {
			b.Flush()
		}
		if rng.Intn(50) == 0 {
			snap = takeSnapshot(t, a)
		}
		if rng.Intn(80) == 0 && snap != nil {
			if err := c.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatal(err)
			}
			applyIn(c, ls[:i], 5)
		}
		if rng.Intn(40) == 0 {
			if da, db, dc := digest(t, a), digest(t, b), digest(t, c); da != db || da != dc {
				t.Fatalf("after entry %d: digests differ %v %v", i, da == db, da == dc)
			}
		}
	}
}
