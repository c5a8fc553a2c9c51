package fsm

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/limitd/limitd/algo"
)

// t0 is an arbitrary leader time in the tests, aligned to an hour so fixed
// windows start there.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()

const sec = int64(time.Second)

func openFSM(t testing.TB, path string, opts Options) *FSM {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "fsm.db")
	}
	f, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func mustSpec(t testing.TB, c algo.Config) algo.Spec {
	t.Helper()
	s, err := c.Spec()
	if err != nil {
		t.Fatalf("spec %+v: %v", c, err)
	}
	return s
}

// logOf numbers commands as raft entries starting at index first.
func logOf(first uint64, cmds ...[]byte) []*raft.Log {
	ls := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		ls[i] = &raft.Log{Index: first + uint64(i), Term: 1, Type: raft.LogCommand, Data: c}
	}
	return ls
}

// applier drives an FSM with consecutive entries.
type driver struct {
	t    testing.TB
	f    *FSM
	next uint64
}

func newDriver(t testing.TB, f *FSM) *driver {
	return &driver{t: t, f: f, next: f.AppliedIndex() + 1}
}

func (d *driver) apply(cmd []byte) interface{} {
	d.t.Helper()
	// applyEntries, not Apply: a fatal error must fail the test, not park it.
	rs, err := d.f.applyEntries([]*raft.Log{{Index: d.next, Term: 1, Type: raft.LogCommand, Data: cmd}})
	if err != nil {
		d.t.Fatalf("apply entry %d: %v", d.next, err)
	}
	d.next++
	return rs[0]
}

func (d *driver) check(now int64, ops ...Op) []Result {
	d.t.Helper()
	r := d.apply(EncodeCheck(nil, now, 0, ops))
	rs, ok := r.([]Result)
	if !ok {
		d.t.Fatalf("check response %T %v", r, r)
	}
	return rs
}

// one checks a single key under a policy and returns the decision.
func (d *driver) one(now int64, policy, key string, cost int64) Result {
	d.t.Helper()
	return d.check(now, Op{Checks: []Check{{Key: key, Policy: policy, Cost: cost}}})[0]
}

func (d *driver) remaining(now int64, policy, key string) int64 {
	d.t.Helper()
	r := d.one(now, policy, key, 0)
	if r.Err != nil {
		d.t.Fatalf("peek %s/%s: %v", policy, key, r.Err)
	}
	return r.Decisions[0].Remaining
}

func (d *driver) putPolicy(p Policy) {
	d.t.Helper()
	if r := d.apply(EncodePutPolicy(p)); r != nil {
		d.t.Fatalf("put policy %s: %v", p.Name, r)
	}
}

func single(key, policy string, cost int64) Op {
	return Op{Checks: []Check{{Key: key, Policy: policy, Cost: cost}}}
}

func digest(t testing.TB, f *FSM) string {
	t.Helper()
	d, err := f.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitCommit waits for the commit Flush started, if it is still being
// written.
func waitCommit(t testing.TB, f *FSM) {
	t.Helper()
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if err := f.store.Commit(); err != nil {
		t.Fatal(err)
	}
}
