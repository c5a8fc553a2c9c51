package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

// The state flush runs beside the applies: while a commit started by Flush
// is held in flight (its goroutine blocked in the store's commit hook, before
// it writes anything), ApplyBatch goes on — through the same lock the flush
// used to hold — and decides from the entries applied before the flush and
// after it. If an apply waited for the flush, this test would hang (it uses
// no clock). The file catches up once the commit is let go, and the digest
// then equals a replica's that committed after every entry.
func TestApplyIsNotBlockedByAFlush(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true, CommitEvery: 1000})
	ref := openFSM(t, "", Options{NoSync: true})
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"})
	next := uint64(1)
	apply := func(cmd []byte) []Result {
		t.Helper()
		var rs []Result
		for _, fsm := range []*FSM{f, ref} {
			r := fsm.ApplyBatch([]*raft.Log{{Index: next, Term: 1, Type: raft.LogCommand, Data: cmd}})[0]
			res, ok := r.([]Result)
			if !ok {
				t.Fatalf("entry %d: response %T %v", next, r, r)
			}
			if rs != nil && fmt.Sprint(res) != fmt.Sprint(rs) {
				t.Fatalf("entry %d: %v, the reference %v", next, rs, res)
			}
			rs = res
		}
		next++
		return rs
	}
	check := func(key, id string) int64 {
		t.Helper()
		op := Op{RequestID: id, Checks: []Check{{Key: key, Spec: &spec, Cost: 1}}}
		return apply(EncodeCheck(nil, t0, 0, []Op{op}))[0].Decisions[0].Remaining
	}
	for i := 0; i < 10; i++ {
		check(fmt.Sprint("k", i%3), fmt.Sprint("id", i))
	}

	entered, release := make(chan struct{}), make(chan struct{})
	f.store.SetCommitHook(func() { close(entered); <-release })
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	<-entered // the commit of entries 1–10 is in progress
	f.store.SetCommitHook(nil)
	if got := check("k0", "id-a"); got != 100-5 {
		t.Fatalf("k0 remaining %d during the flush, want 95: the frozen generation was not read", got)
	}
	check("k9", "id-b")
	// A replay of a request id stored before the flush is found in it.
	op := Op{RequestID: "id0", Checks: []Check{{Key: "k0", Spec: &spec, Cost: 1}}}
	if r := apply(EncodeCheck(nil, t0, 0, []Op{op}))[0]; !r.Replayed {
		t.Fatalf("request id0 during the flush: %+v, want its replay", r)
	}
	if err := f.Flush(); err != nil { // one commit at a time: this one does nothing
		t.Fatal(err)
	}
	if f.ApplyWait() != 0 {
		t.Fatalf("applies waited %v for the state machine", f.ApplyWait())
	}
	var inFile persist.Meta
	view := func() {
		if err := f.store.View(func(tx *persist.Tx) error { inFile = tx.Meta(); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if view(); inFile.AppliedIndex != 0 {
		t.Fatalf("the file is at %d while its first commit is held", inFile.AppliedIndex)
	}

	close(release)
	waitCommit(t, f)
	if view(); inFile.AppliedIndex != 13 {
		t.Fatalf("after the flushes the file is at %d, want 13", inFile.AppliedIndex)
	}
	if n, _ := f.Commits(); n != 2 {
		t.Fatalf("%d commits counted, want 2 (the held one and the rest)", n)
	}
	if d, want := digest(t, f), digest(t, ref); d != want {
		t.Fatalf("digest %s, the reference's %s", d, want)
	}
}
